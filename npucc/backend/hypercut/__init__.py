"""HyperCut inter-layer scheduling on a mesh (paper 002): the beam search and SET's baselines
over a price function, with the SET-aligned model (`set_model`) as their comparison price."""
