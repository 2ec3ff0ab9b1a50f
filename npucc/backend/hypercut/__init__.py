"""HyperCut inter-layer scheduling on a mesh (paper 002): search, baselines and the pass."""
