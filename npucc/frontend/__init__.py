"""ONNX frontend: load, check and import a model into the graph IR, then legalize its ops."""
