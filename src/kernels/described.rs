//! Reading the description a packed weight exports beside its byte sections (a context file's
//! JSON, `ep::context`): a field by name, every error naming the kind of weight and the field.
//! Shared by the packed layouts that persist themselves (`matmul_nbits::persist`,
//! `gemm::packed`, `qgemm::pack`).

use serde_json::{Map, Value};

/// The error for field `field` of a `kind` description: what is wrong with it.
pub(crate) fn bad(kind: &str, field: &str, what: &str) -> String {
    format!("packed {kind} weight: {field}: {what}")
}

/// Field `name` as an unsigned integer.
pub(crate) fn uint(kind: &str, obj: &Map<String, Value>, name: &str) -> Result<u64, String> {
    obj.get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| bad(kind, name, "missing or not an unsigned integer"))
}

/// Field `name` as a size of this address space.
pub(crate) fn size(kind: &str, obj: &Map<String, Value>, name: &str) -> Result<usize, String> {
    usize::try_from(uint(kind, obj, name)?)
        .map_err(|_| bad(kind, name, "does not fit the address space"))
}

/// Field `name` as a boolean.
pub(crate) fn flag(kind: &str, obj: &Map<String, Value>, name: &str) -> Result<bool, String> {
    obj.get(name)
        .and_then(Value::as_bool)
        .ok_or_else(|| bad(kind, name, "missing or not a boolean"))
}

/// Field `name` as an array.
pub(crate) fn array<'a>(
    kind: &str,
    obj: &'a Map<String, Value>,
    name: &str,
) -> Result<&'a Vec<Value>, String> {
    obj.get(name)
        .and_then(Value::as_array)
        .ok_or_else(|| bad(kind, name, "missing or not an array"))
}
