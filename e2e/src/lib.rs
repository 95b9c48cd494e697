//! End-to-end harness: loads libonnxruntime.so and the rcpu plugin side by side.
