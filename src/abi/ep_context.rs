//! The ABI side of rcpu's EPContext models (`ep::context`): recognising rcpu's own `EPContext`
//! nodes, finding the context file a node names, and handing ORT the `EPContext` nodes of a
//! compiled session (`OrtModelEditorApi::CreateNode`).

use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ort_sys::OrtOpAttrType;

use super::api::api;
use super::ep_types::{OrtNode, OrtOpAttr};
use super::fused::CompileEnv;
use super::graph::{Graph, Node};
use super::status::{check, Error, Result};
use crate::ep::context::file::{self, ContextFile, Identity, PartitionOut};
use crate::ep::context::{self as ctx, check_file_name};
use crate::ep::op::KernelEnv;
use crate::ep::{EP_NAME, VERSION};

/// Whether `node` is an `EPContext` node rcpu wrote (its `source` is rcpu's EP name).
pub(crate) fn is_own_context_node(node: &Node<'_>) -> bool {
    node.op_type().is_ok_and(|o| o == ctx::OP)
        && node.domain().is_ok_and(|d| d == ctx::DOMAIN)
        && node.attr_string("source").is_some_and(|s| s == EP_NAME)
}

/// When `graph` (a fused node's subgraph at `Compile`) is one of rcpu's `EPContext` nodes: the
/// context file it names (mapped and checked for this session) and its partition's name.
pub(crate) fn context_of(
    graph: &Graph<'_>,
    env: &Arc<KernelEnv>,
) -> Result<Option<(Arc<ContextFile>, String)>> {
    let nodes = graph.nodes()?;
    let [node] = nodes[..] else {
        return Ok(None);
    };
    if !is_own_context_node(&node) {
        return Ok(None);
    }
    let label = format!("EPContext node '{}'", node.name().unwrap_or_default());
    let bad = |what: &str| Error::invalid_argument(format!("{label}: {what}"));
    if node.attr_i64("embed_mode").unwrap_or(0) != 0 {
        return Err(bad(
            "embed_mode 1: rcpu's context is always a file beside the model",
        ));
    }
    let name = node
        .attr_string("ep_cache_context")
        .ok_or_else(|| bad("no ep_cache_context (the context file's name)"))?;
    let name = check_file_name(&name).map_err(|e| e.context(&label))?;
    let part = node
        .attr_string("partition_name")
        .ok_or_else(|| bad("no partition_name"))?;
    let dir = graph
        .model_path()?
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .ok_or_else(|| {
            bad("the model was not loaded from a file, so its context file cannot be found")
        })?;
    let path = dir.join(name);
    let f = ContextFile::open(&path, &Identity::current(env.acc4_f16_scales))
        .map_err(|e| e.context(&label))?;
    Ok(Some((f, part)))
}

/// Where the context model goes, as ORT will write it: `ep.context_file_path`, else
/// `<model>_ctx.onnx` beside the input model.
fn context_model_path(graph: &Graph<'_>, o: &ctx::ContextOptions) -> Result<PathBuf> {
    if let Some(p) = &o.file_path {
        return Ok(PathBuf::from(p));
    }
    graph
        .model_path()?
        .and_then(|m| ctx::default_model_path(&m))
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "rcpu cannot place its context file: the model was not loaded from a file; \
                 set {}",
                ctx::KEY_FILE_PATH
            ))
        })
}

/// Writes the context file of `parts` beside the context model and fills `out` with one
/// `EPContext` node per fused node (`fused[i]` for `out[i]`).
pub(crate) fn write_context(
    first: &Graph<'_>,
    fused: &[*const OrtNode],
    ce: &CompileEnv<'_>,
    parts: &[PartitionOut<'_>],
    out: &mut [*mut OrtNode],
) -> Result<()> {
    if parts.len() != fused.len() || out.len() != fused.len() {
        return Err(Error::fail(
            "a context model needs every fused node compiled from the original model",
        ));
    }
    if ce.context.embed_asked {
        log::info!(
            "{EP_NAME}: {}=1 asked; rcpu keeps its packed weights in a file beside the model \
             (embedded, they could not be mapped)",
            ctx::KEY_EMBED_MODE
        );
    }
    let model = context_model_path(first, ce.context)?;
    let nth = ce
        .context_files
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = ctx::file_name_for(&model, nth).ok_or_else(|| {
        Error::invalid_argument(format!(
            "rcpu cannot name a context file for context model '{}'",
            model.display()
        ))
    })?;
    let path = model
        .parent()
        .map_or_else(|| PathBuf::from(&name), |d| d.join(&name));
    let bytes = file::write(&path, &Identity::current(ce.env.acc4_f16_scales), parts)?;
    log::info!(
        "{EP_NAME}: wrote context file {} ({bytes} bytes, {} partition(s))",
        path.display(),
        parts.len()
    );
    for (i, (&f, p)) in fused.iter().zip(parts).enumerate() {
        // SAFETY: the fused nodes ORT passed to Compile, valid for the call.
        let node = unsafe { Node::from_raw(f) };
        match create_node(&node, &name, &p.name) {
            Ok(n) => out[i] = n,
            Err(e) => {
                for o in out.iter_mut().take(i) {
                    // SAFETY: made by CreateNode below and not yet handed to ORT.
                    unsafe { (api().ort.ReleaseNode)(*o) };
                    *o = std::ptr::null_mut();
                }
                return Err(e);
            }
        }
    }
    Ok(())
}

/// An attribute for `CreateNode`, released on drop unless `CreateNode` took it: ORT 1.31's
/// `CreateNode` takes ownership of the attributes it is given (releasing them after it is a
/// double free, seen as an abort in `free`).
struct Attr(*mut OrtOpAttr);

impl Drop for Attr {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: made by CreateOpAttr, released once.
            unsafe { (api().ort.ReleaseOpAttr)(self.0) };
        }
    }
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid_argument(format!("name '{s}' holds a NUL byte")))
}

fn string_attr(name: &str, value: &str) -> Result<Attr> {
    let n = cstring(name)?;
    let len = i32::try_from(value.len())
        .map_err(|_| Error::invalid_argument(format!("attribute {name} is too long")))?;
    let mut a = std::ptr::null_mut();
    // SAFETY: n NUL-terminated; value valid for len bytes; ORT copies both.
    unsafe {
        check((api().ort.CreateOpAttr)(
            n.as_ptr(),
            value.as_ptr() as *const c_void,
            len,
            OrtOpAttrType::ORT_OP_ATTR_STRING,
            &mut a,
        ))?
    };
    Ok(Attr(a))
}

fn int_attr(name: &str, value: i64) -> Result<Attr> {
    let n = cstring(name)?;
    let mut a = std::ptr::null_mut();
    // SAFETY: n NUL-terminated; one i64 read from a live local; ORT copies it.
    unsafe {
        check((api().ort.CreateOpAttr)(
            n.as_ptr(),
            &value as *const i64 as *const c_void,
            1,
            OrtOpAttrType::ORT_OP_ATTR_INT,
            &mut a,
        ))?
    };
    Ok(Attr(a))
}

/// The `EPContext` node standing for fused node `fused`: its inputs and outputs, the context
/// file's name and the partition's.
fn create_node(fused: &Node<'_>, file_name: &str, partition: &str) -> Result<*mut OrtNode> {
    let names = |vs: Vec<Option<super::graph::ValueInfo<'_>>>| -> Result<Vec<CString>> {
        vs.into_iter()
            .map(|v| cstring(&v.map(|v| v.name()).transpose()?.unwrap_or_default()))
            .collect()
    };
    let inputs = names(fused.inputs()?)?;
    let outputs = names(fused.outputs()?)?;
    let in_ptrs: Vec<_> = inputs.iter().map(|c| c.as_ptr()).collect();
    let out_ptrs: Vec<_> = outputs.iter().map(|c| c.as_ptr()).collect();
    let attrs = [
        string_attr("ep_cache_context", file_name)?,
        int_attr("embed_mode", 0)?,
        int_attr("main_context", 1)?,
        string_attr("source", EP_NAME)?,
        string_attr("partition_name", partition)?,
        string_attr("ep_sdk_version", VERSION)?,
    ];
    let mut raw: Vec<*mut OrtOpAttr> = attrs.iter().map(|a| a.0).collect();
    let (op, domain, name) = (
        cstring(ctx::OP)?,
        cstring(ctx::DOMAIN)?,
        cstring(partition)?,
    );
    // SAFETY: GetModelEditorApi returns ORT's static table (NULL only in minimal builds).
    let ed = unsafe { (api().ort.GetModelEditorApi)() };
    if ed.is_null() {
        return Err(Error::fail("this ONNX Runtime has no model editor API"));
    }
    let mut node = std::ptr::null_mut();
    // Whatever CreateNode answers, the attributes are no longer ours to release: on success the
    // node owns them; on failure ORT may have taken them, and a leak of a few bytes on an error
    // path beats a double free.
    let attrs = attrs.map(|mut a| std::mem::replace(&mut a.0, std::ptr::null_mut()));
    debug_assert_eq!(attrs.len(), raw.len());
    // SAFETY: every string NUL-terminated and alive for the call; the arrays hold the counts
    // passed; ORT copies the names and takes the attributes into the new node, which it owns
    // once returned.
    unsafe {
        check(((*ed).CreateNode)(
            op.as_ptr(),
            domain.as_ptr(),
            name.as_ptr(),
            in_ptrs.as_ptr(),
            in_ptrs.len(),
            out_ptrs.as_ptr(),
            out_ptrs.len(),
            raw.as_mut_ptr(),
            raw.len(),
            &mut node,
        ))?
    };
    Ok(node)
}
