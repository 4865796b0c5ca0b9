"""Front ends: the ONNX importer and the Network builder."""
