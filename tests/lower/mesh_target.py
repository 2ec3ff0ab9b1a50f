"""A 2x2 mesh of davinci-core cores, for tests that spread a layer's tiles over cores."""

from npucc.target import load_target, target_from_dict

_data = load_target("davinci-core").to_dict()
_data["target"]["name"] = "mesh2x2"
_data["mesh"].update(rows=2, cols=2)
MESH2X2 = target_from_dict(_data, "tests")
