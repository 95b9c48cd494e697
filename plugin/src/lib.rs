//! The cdylib ONNX Runtime loads. Exports only; all logic lives in the `rcpu` crate.
