//! A small safe wrapper over the real ONNX Runtime C API (libonnxruntime.so from the wheel, loaded
//! with libloading; `OrtApi` declared by ort-sys): environment, plugin registration, sessions on
//! ORT's CPU EP or on rcpu, tensors in and out. All FFI of the e2e crate is in this file.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::sync::OnceLock;

use ort_sys::*;

/// Result with a message.
pub type Res<T> = Result<T, String>;

/// Element data of a tensor crossing the C API.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

/// A host tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub shape: Vec<i64>,
    pub data: Data,
}

impl Tensor {
    pub fn f32(shape: &[i64], v: Vec<f32>) -> Tensor {
        Tensor {
            shape: shape.to_vec(),
            data: Data::F32(v),
        }
    }
    pub fn as_f32(&self) -> &[f32] {
        match &self.data {
            Data::F32(v) => v,
            other => panic!("expected f32 tensor, got {other:?}"),
        }
    }
    fn parts(&self) -> (*const c_void, usize, ONNXTensorElementDataType) {
        use ONNXTensorElementDataType::*;
        match &self.data {
            Data::F32(v) => (
                v.as_ptr() as _,
                v.len() * 4,
                ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
            ),
            Data::U8(v) => (
                v.as_ptr() as _,
                v.len(),
                ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
            ),
            Data::I8(v) => (v.as_ptr() as _, v.len(), ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8),
            Data::I32(v) => (
                v.as_ptr() as _,
                v.len() * 4,
                ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,
            ),
            Data::I64(v) => (
                v.as_ptr() as _,
                v.len() * 8,
                ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
            ),
        }
    }
    /// [`Tensor::parts`] for a buffer ORT may write (a pre-allocated output sharing it).
    fn parts_mut(&mut self) -> (*mut c_void, usize, ONNXTensorElementDataType) {
        let elem = self.parts().2;
        let (p, bytes): (*mut c_void, usize) = match &mut self.data {
            Data::F32(v) => (v.as_mut_ptr() as _, v.len() * 4),
            Data::U8(v) => (v.as_mut_ptr() as _, v.len()),
            Data::I8(v) => (v.as_mut_ptr() as _, v.len()),
            Data::I32(v) => (v.as_mut_ptr() as _, v.len() * 4),
            Data::I64(v) => (v.as_mut_ptr() as _, v.len() * 8),
        };
        (p, bytes, elem)
    }
}

/// Where a session runs.
#[derive(Debug, Clone)]
pub enum Provider {
    /// Stock ORT, CPU EP only.
    OrtCpu,
    /// rcpu with these provider options (ORT's CPU EP takes what rcpu does not claim).
    Rcpu(Vec<(String, String)>),
}

/// How to build a session.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    pub provider: Provider,
    /// ORT intra-op threads (for the CPU EP arm and ORT's fallback nodes); None = ORT default.
    pub intra_op_threads: Option<usize>,
    /// Extra session config entries.
    pub config: Vec<(String, String)>,
    /// ORT's profiler on, writing `<prefix>_<date>.json` (see `Session::end_profiling`).
    pub profile: Option<String>,
}

impl SessionSpec {
    pub fn ort(threads: Option<usize>) -> Self {
        SessionSpec {
            provider: Provider::OrtCpu,
            intra_op_threads: threads,
            config: vec![],
            profile: None,
        }
    }
    pub fn rcpu(options: &[(&str, &str)]) -> Self {
        SessionSpec {
            provider: Provider::Rcpu(
                options
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            intra_op_threads: Some(1),
            config: vec![],
            profile: None,
        }
    }
}

/// The loaded runtime and its single environment.
pub struct Ort {
    _lib: libloading::Library,
    api: &'static OrtApi,
    env: *mut OrtEnv,
    version: String,
}

// SAFETY: OrtApi is an immutable table and OrtEnv is thread-safe per ORT's documentation.
unsafe impl Send for Ort {}
// SAFETY: as above.
unsafe impl Sync for Ort {}

fn check(api: &OrtApi, st: OrtStatusPtr) -> Res<()> {
    if st.0.is_null() {
        return Ok(());
    }
    // SAFETY: st is a live status from ORT; released once here.
    unsafe {
        let m = (api.GetErrorMessage)(st.0);
        let msg = if m.is_null() {
            "(no message)".to_string()
        } else {
            CStr::from_ptr(m).to_string_lossy().into_owned()
        };
        (api.ReleaseStatus)(st.0);
        Err(msg)
    }
}

fn cstring(s: &str) -> CString {
    CString::new(s).expect("no NUL in strings passed to ORT")
}

static GLOBAL: OnceLock<Ort> = OnceLock::new();

impl Ort {
    /// The process's runtime, loaded from `RCPU_ORT_LIB` (set by scripts/env.sh) or
    /// `<repo>/.venv/ort_lib_path`.
    pub fn get() -> &'static Ort {
        GLOBAL.get_or_init(|| {
            let path = crate::paths::ort_lib().unwrap_or_else(|e| panic!("{e}"));
            Ort::load(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
        })
    }

    /// [`Ort::get`] with the environment's log messages at `level` and above sent to `sink`
    /// instead of ORT's stderr sink. `None` when the process's runtime already existed (an
    /// environment's logging is fixed when it is created), so call it before anything else.
    pub fn get_with_log_sink(
        level: OrtLoggingLevel,
        sink: OrtLoggingFunction,
    ) -> Option<&'static Ort> {
        let mut created = false;
        let ort = GLOBAL.get_or_init(|| {
            created = true;
            let path = crate::paths::ort_lib().unwrap_or_else(|e| panic!("{e}"));
            Ort::load_logging(&path, Some((level, sink)))
                .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
        });
        created.then_some(ort)
    }

    /// Loads libonnxruntime.so and creates the environment.
    pub fn load(path: &Path) -> Res<Ort> {
        Self::load_logging(path, None)
    }

    /// [`Ort::load`], logging to `sink` (at its level) when given, else to ORT's stderr sink at
    /// ERROR.
    fn load_logging(path: &Path, sink: Option<(OrtLoggingLevel, OrtLoggingFunction)>) -> Res<Ort> {
        // SAFETY: loading the ORT shared library runs its (trusted) initialisers.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        // SAFETY: OrtGetApiBase has this signature in every ORT release.
        let base = unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn() -> *const OrtApiBase> =
                lib.get(b"OrtGetApiBase\0").map_err(|e| e.to_string())?;
            f()
        };
        // SAFETY: base is ORT's static api base; version string is static.
        let (api, version) = unsafe {
            let v = CStr::from_ptr(((*base).GetVersionString)())
                .to_string_lossy()
                .into_owned();
            let api = ((*base).GetApi)(ORT_API_VERSION);
            if api.is_null() {
                return Err(format!("ORT {v} does not offer API {ORT_API_VERSION}"));
            }
            (&*api, v)
        };
        let mut env = std::ptr::null_mut();
        let id = cstring("rcpu-e2e");
        let st = match sink {
            // SAFETY: out-pointer live; logid copied; the sink is a plain function that lives
            // as long as the process and takes no state (param NULL).
            Some((level, f)) => unsafe {
                (api.CreateEnvWithCustomLogger)(
                    f,
                    std::ptr::null_mut(),
                    level,
                    id.as_ptr(),
                    &mut env,
                )
            },
            // SAFETY: out-pointer live; logid copied.
            None => unsafe {
                (api.CreateEnv)(
                    OrtLoggingLevel::ORT_LOGGING_LEVEL_ERROR,
                    id.as_ptr(),
                    &mut env,
                )
            },
        };
        check(api, st)?;
        Ok(Ort {
            _lib: lib,
            api,
            env,
            version,
        })
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    /// Registers a plugin EP library under `name`.
    pub fn register(&self, name: &str, path: &Path) -> Res<()> {
        let n = cstring(name);
        let p = cstring(path.to_str().ok_or("non-UTF-8 path")?);
        // SAFETY: env live; strings copied by ORT.
        check(self.api, unsafe {
            (self.api.RegisterExecutionProviderLibrary)(self.env, n.as_ptr(), p.as_ptr())
        })
    }

    /// Unregisters a plugin (only after every session using it is released).
    pub fn unregister(&self, name: &str) -> Res<()> {
        let n = cstring(name);
        // SAFETY: env live.
        check(self.api, unsafe {
            (self.api.UnregisterExecutionProviderLibrary)(self.env, n.as_ptr())
        })
    }

    /// Every EP device with its EP name and vendor.
    pub fn devices(&self) -> Res<Vec<(String, String, usize)>> {
        Ok(self
            .raw_devices()?
            .iter()
            .enumerate()
            .map(|(i, (n, v, _))| (n.clone(), v.clone(), i))
            .collect())
    }

    fn raw_devices(&self) -> Res<Vec<(String, String, *const OrtEpDevice)>> {
        let mut devs: *const *const OrtEpDevice = std::ptr::null();
        let mut n = 0usize;
        // SAFETY: env live; the array is owned by the env.
        check(self.api, unsafe {
            (self.api.GetEpDevices)(self.env, &mut devs, &mut n)
        })?;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: i < n; names are owned by the device.
            unsafe {
                let d = *devs.add(i);
                let name = CStr::from_ptr((self.api.EpDevice_EpName)(d))
                    .to_string_lossy()
                    .into_owned();
                let vendor = CStr::from_ptr((self.api.EpDevice_EpVendor)(d))
                    .to_string_lossy()
                    .into_owned();
                out.push((name, vendor, d));
            }
        }
        Ok(out)
    }

    /// Creates a session for `model` (serialized ModelProto).
    pub fn session(&self, model: &[u8], spec: &SessionSpec) -> Res<Session> {
        let api = self.api;
        let mut so = std::ptr::null_mut();
        // SAFETY: out-pointer live; released below.
        check(api, unsafe { (api.CreateSessionOptions)(&mut so) })?;
        let result = (|| -> Res<Session> {
            if let Some(t) = spec.intra_op_threads {
                // SAFETY: so live.
                check(api, unsafe { (api.SetIntraOpNumThreads)(so, t as i32) })?;
            }
            if let Some(prefix) = &spec.profile {
                let prefix = cstring(prefix);
                // SAFETY: so live; the prefix is copied.
                check(api, unsafe { (api.EnableProfiling)(so, prefix.as_ptr()) })?;
            }
            for (k, v) in &spec.config {
                let (k, v) = (cstring(k), cstring(v));
                // SAFETY: so live; strings copied.
                check(api, unsafe {
                    (api.AddSessionConfigEntry)(so, k.as_ptr(), v.as_ptr())
                })?;
            }
            if let Provider::Rcpu(opts) = &spec.provider {
                let devs: Vec<*const OrtEpDevice> = self
                    .raw_devices()?
                    .into_iter()
                    .filter(|(n, _, _)| n == crate::EP_NAME)
                    .map(|(_, _, d)| d)
                    .collect();
                if devs.is_empty() {
                    return Err(format!("{} is not registered", crate::EP_NAME));
                }
                let keys: Vec<CString> = opts.iter().map(|(k, _)| cstring(k)).collect();
                let vals: Vec<CString> = opts.iter().map(|(_, v)| cstring(v)).collect();
                let kp: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
                let vp: Vec<*const c_char> = vals.iter().map(|v| v.as_ptr()).collect();
                // SAFETY: all arrays live for the call; ORT copies them.
                check(api, unsafe {
                    (api.SessionOptionsAppendExecutionProvider_V2)(
                        so,
                        self.env,
                        devs.as_ptr(),
                        1,
                        kp.as_ptr(),
                        vp.as_ptr(),
                        kp.len(),
                    )
                })?;
            }
            let mut sess = std::ptr::null_mut();
            // SAFETY: model bytes live for the call; so and env live.
            check(api, unsafe {
                (api.CreateSessionFromArray)(
                    self.env,
                    model.as_ptr() as _,
                    model.len(),
                    so,
                    &mut sess,
                )
            })?;
            Session::new(api, sess)
        })();
        // SAFETY: created above, released once (the session keeps what it needs).
        unsafe { (api.ReleaseSessionOptions)(so) };
        result
    }
}

/// A live inference session.
pub struct Session {
    api: &'static OrtApi,
    raw: *mut OrtSession,
    inputs: Vec<CString>,
    outputs: Vec<CString>,
}

// SAFETY: ORT sessions support concurrent Run calls.
unsafe impl Send for Session {}
// SAFETY: as above.
unsafe impl Sync for Session {}

impl Session {
    fn new(api: &'static OrtApi, raw: *mut OrtSession) -> Res<Session> {
        let mut alloc = std::ptr::null_mut();
        // SAFETY: default allocator is a static owned by ORT.
        check(api, unsafe {
            (api.GetAllocatorWithDefaultOptions)(&mut alloc)
        })?;
        let names = |input: bool| -> Res<Vec<CString>> {
            let mut n = 0usize;
            // SAFETY: session live.
            check(api, unsafe {
                if input {
                    (api.SessionGetInputCount)(raw, &mut n)
                } else {
                    (api.SessionGetOutputCount)(raw, &mut n)
                }
            })?;
            (0..n)
                .map(|i| {
                    let mut p: *mut c_char = std::ptr::null_mut();
                    // SAFETY: session live; the name is allocated with `alloc` and freed here.
                    unsafe {
                        check(
                            api,
                            if input {
                                (api.SessionGetInputName)(raw, i, alloc, &mut p)
                            } else {
                                (api.SessionGetOutputName)(raw, i, alloc, &mut p)
                            },
                        )?;
                        let s = CStr::from_ptr(p).to_owned();
                        check(api, (api.AllocatorFree)(alloc, p as _))?;
                        Ok(s)
                    }
                })
                .collect()
        };
        let inputs = names(true)?;
        let outputs = names(false)?;
        Ok(Session {
            api,
            raw,
            inputs,
            outputs,
        })
    }

    /// Stops ORT's profiler (sessions made with `SessionSpec::profile`); returns the file it wrote.
    pub fn end_profiling(&self) -> Res<String> {
        let api = self.api;
        let mut alloc = std::ptr::null_mut();
        // SAFETY: default allocator is a static owned by ORT.
        check(api, unsafe {
            (api.GetAllocatorWithDefaultOptions)(&mut alloc)
        })?;
        let mut p: *mut c_char = std::ptr::null_mut();
        // SAFETY: session live; the name is allocated with `alloc` and freed here.
        unsafe {
            check(api, (api.SessionEndProfiling)(self.raw, alloc, &mut p))?;
            if p.is_null() {
                return Err("SessionEndProfiling returned no file name".into());
            }
            let s = CStr::from_ptr(p).to_string_lossy().into_owned();
            check(api, (api.AllocatorFree)(alloc, p as _))?;
            Ok(s)
        }
    }

    pub fn output_names(&self) -> Vec<String> {
        self.outputs
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    pub fn input_names(&self) -> Vec<String> {
        self.inputs
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    /// Runs with inputs in the session's input order; returns every output.
    pub fn run(&self, inputs: &[Tensor]) -> Res<Vec<Tensor>> {
        let ins = InPtr::read_only(inputs);
        let outs = self.run_with(ins, &[], read_tensor)?;
        Ok(outs.into_iter().flatten().collect())
    }

    /// [`Session::run`] that releases the outputs unread: what a timed step costs an application
    /// that consumes ORT's outputs in place (no copy of the logits and the presents per step).
    pub fn run_discard(&self, inputs: &[Tensor]) -> Res<()> {
        let ins = InPtr::read_only(inputs);
        self.run_with(ins, &[], |_, _| Ok(())).map(|_| ())
    }

    /// [`Session::run`] where output `o` is written into input `alias[o]` when that is `Some`: a
    /// pre-allocated output sharing the input's buffer, the way onnxruntime-genai hands a model
    /// its KV cache with `past_present_share_buffer` on (each present is the past buffer itself).
    /// Returns the other outputs, `None` for the aliased ones (their data is in `inputs`).
    pub fn run_aliased(
        &self,
        inputs: &mut [Tensor],
        alias: &[Option<usize>],
    ) -> Res<Vec<Option<Tensor>>> {
        let ins = InPtr::writable(inputs);
        self.run_with(ins, alias, read_tensor)
    }

    /// [`Session::run_aliased`] that releases the other outputs unread (see
    /// [`Session::run_discard`]).
    pub fn run_aliased_discard(&self, inputs: &mut [Tensor], alias: &[Option<usize>]) -> Res<()> {
        let ins = InPtr::writable(inputs);
        self.run_with(ins, alias, |_, _| Ok(())).map(|_| ())
    }

    /// Runs the session on `inputs`, output `o` into input `alias[o]` where given (a missing
    /// entry: none), and hands every other output to `read` before releasing it.
    fn run_with<R>(
        &self,
        inputs: Vec<InPtr>,
        alias: &[Option<usize>],
        read: impl Fn(&OrtApi, *mut OrtValue) -> Res<R>,
    ) -> Res<Vec<Option<R>>> {
        let api = self.api;
        if inputs.len() != self.inputs.len() {
            return Err(format!(
                "model has {} inputs, got {}",
                self.inputs.len(),
                inputs.len()
            ));
        }
        if let Some(bad) = alias.iter().flatten().find(|&&i| i >= inputs.len()) {
            return Err(format!(
                "output aliased to input {bad}, of {}",
                inputs.len()
            ));
        }
        let mut mem = std::ptr::null_mut();
        // SAFETY: out-pointer live; released below.
        check(api, unsafe {
            (api.CreateCpuMemoryInfo)(
                OrtAllocatorType::OrtArenaAllocator,
                OrtMemType::OrtMemTypeDefault,
                &mut mem,
            )
        })?;
        let mut vals: Vec<*mut OrtValue> = Vec::new();
        let result = (|| -> Res<Vec<Option<R>>> {
            for t in &inputs {
                let mut v = std::ptr::null_mut();
                // SAFETY: the tensor borrows the input's buffer, which outlives the Run call
                // below (`InPtr` holds the borrow); ORT writes it only when it is an aliased
                // output's, whose pointer came from a mutable borrow (`run_aliased`).
                check(api, unsafe {
                    (api.CreateTensorWithDataAsOrtValue)(
                        mem,
                        t.ptr,
                        t.bytes,
                        t.shape.as_ptr(),
                        t.shape.len(),
                        t.elem,
                        &mut v,
                    )
                })?;
                vals.push(v);
            }
            let in_names: Vec<*const c_char> = self.inputs.iter().map(|s| s.as_ptr()).collect();
            let out_names: Vec<*const c_char> = self.outputs.iter().map(|s| s.as_ptr()).collect();
            let aliased = |o: usize| alias.get(o).copied().flatten();
            // An aliased output is pre-allocated: the input's own value, which Run fills.
            let mut outs: Vec<*mut OrtValue> = (0..out_names.len())
                .map(|o| aliased(o).map_or(std::ptr::null_mut(), |i| vals[i]))
                .collect();
            // SAFETY: arrays sized consistently; session live.
            check(api, unsafe {
                (api.Run)(
                    self.raw,
                    std::ptr::null(),
                    in_names.as_ptr(),
                    vals.as_ptr() as *const *const OrtValue,
                    vals.len(),
                    out_names.as_ptr(),
                    out_names.len(),
                    outs.as_mut_ptr(),
                )
            })?;
            let r = outs
                .iter()
                .enumerate()
                .map(|(o, &v)| match aliased(o) {
                    Some(_) => Ok(None),
                    None => read(api, v).map(Some),
                })
                .collect();
            for (o, v) in outs.into_iter().enumerate() {
                if aliased(o).is_none() {
                    // SAFETY: outputs allocated by Run, released once (the aliased ones are
                    // the inputs' values, released below).
                    unsafe { (api.ReleaseValue)(v) };
                }
            }
            r
        })();
        for v in vals {
            // SAFETY: created above, released once.
            unsafe { (api.ReleaseValue)(v) };
        }
        // SAFETY: created above.
        unsafe { (api.ReleaseMemoryInfo)(mem) };
        result
    }
}

/// One input of a run: its buffer (the caller of [`Session::run_with`] holds the borrow for the
/// run), byte length, element type and shape.
struct InPtr {
    ptr: *mut c_void,
    bytes: usize,
    elem: ONNXTensorElementDataType,
    shape: Vec<i64>,
}

impl InPtr {
    /// Inputs ORT only reads.
    fn read_only(inputs: &[Tensor]) -> Vec<InPtr> {
        inputs
            .iter()
            .map(|t| {
                let (p, bytes, elem) = t.parts();
                InPtr::of(&t.shape, (p as *mut c_void, bytes, elem))
            })
            .collect()
    }

    /// Inputs ORT may write (those an output is aliased to).
    fn writable(inputs: &mut [Tensor]) -> Vec<InPtr> {
        inputs
            .iter_mut()
            .map(|t| {
                let parts = t.parts_mut();
                InPtr::of(&t.shape, parts)
            })
            .collect()
    }

    fn of(
        shape: &[i64],
        (ptr, bytes, elem): (*mut c_void, usize, ONNXTensorElementDataType),
    ) -> InPtr {
        InPtr {
            ptr,
            bytes,
            elem,
            shape: shape.to_vec(),
        }
    }
}

fn read_tensor(api: &OrtApi, v: *mut OrtValue) -> Res<Tensor> {
    use ONNXTensorElementDataType::*;
    let mut info = std::ptr::null_mut();
    // SAFETY: v is a live output value; info released below.
    check(api, unsafe { (api.GetTensorTypeAndShape)(v, &mut info) })?;
    let mut elem = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    let mut nd = 0usize;
    // SAFETY: info live.
    check(api, unsafe { (api.GetTensorElementType)(info, &mut elem) })?;
    // SAFETY: info live; nd is a valid out-pointer.
    check(api, unsafe { (api.GetDimensionsCount)(info, &mut nd) })?;
    let mut shape = vec![0i64; nd];
    // SAFETY: shape has nd slots.
    check(api, unsafe {
        (api.GetDimensions)(info, shape.as_mut_ptr(), nd)
    })?;
    // SAFETY: created above.
    unsafe { (api.ReleaseTensorTypeAndShapeInfo)(info) };
    let n: usize = shape.iter().map(|&d| d as usize).product();
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: v live.
    check(api, unsafe { (api.GetTensorMutableData)(v, &mut p) })?;
    // SAFETY: ORT's buffer holds n elements of the reported type.
    let data = unsafe {
        match elem {
            _ if n == 0 => match elem {
                ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT => Data::F32(vec![]),
                ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 => Data::I64(vec![]),
                _ => Data::U8(vec![]),
            },
            ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT => {
                Data::F32(std::slice::from_raw_parts(p as *const f32, n).to_vec())
            }
            ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 => {
                Data::U8(std::slice::from_raw_parts(p as *const u8, n).to_vec())
            }
            ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 => {
                Data::I8(std::slice::from_raw_parts(p as *const i8, n).to_vec())
            }
            ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 => {
                Data::I32(std::slice::from_raw_parts(p as *const i32, n).to_vec())
            }
            ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 => {
                Data::I64(std::slice::from_raw_parts(p as *const i64, n).to_vec())
            }
            other => return Err(format!("unsupported output type {other:?}")),
        }
    };
    Ok(Tensor { shape, data })
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: created in Ort::session, released once.
        unsafe { (self.api.ReleaseSession)(self.raw) };
    }
}
