"""Front end of the verifier: ONNX models, VNN-LIB properties and VNN-COMP result files."""
