//! The `OrtEpFactory` shell: vtable, casts and panic guards. Logic lives in `crate::ep`.

use std::ffi::{c_char, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

use ort_sys::OrtHardwareDeviceType;

use super::api::{api, negotiate};
use super::ep_types::*;
use super::log_bridge::{self, Logger};
use super::session::config_entries;
use super::status::{check_raw, guard, guard_value, Error};
use crate::ep::{EP_NAME, VENDOR, VENDOR_ID, VERSION};

/// `OrtEpFactory` first so a `*mut OrtEpFactory` from ORT is a `*mut FactoryShell`.
///
/// Lifetime: the shell is freed when its last reference goes, where the references are ORT's
/// handle (dropped by `ReleaseEpFactory`) and one per live EP (dropped by `ReleaseEp`). ORT must
/// release every session before it unregisters the library, but when an app does not, ORT
/// still calls `ReleaseEp` on this factory after `ReleaseEpFactory`: the shell must outlive
/// that call, and so must the library's code (see [`release_ep_factory`]).
#[repr(C)]
pub struct FactoryShell {
    base: OrtEpFactory,
    name: CString,
    vendor: CString,
    version: CString,
    refs: AtomicUsize,
    /// The environment's logger ORT gave `CreateEpFactories` (NULL if none), routed to by the
    /// `log` bridge until this factory is released.
    default_logger: *const OrtLogger,
}

/// Drops one reference to the shell; the last one frees it.
///
/// # Safety
/// `f` is a live shell made by [`create_ep_factories`] and the caller owns one of its
/// references, which it gives up here (it must not touch `f` afterwards).
unsafe fn unref(f: *mut FactoryShell) {
    // SAFETY: live shell per the contract. AcqRel: every use of the shell by other holders
    // happens-before the final decrement, so the free below sees them all complete.
    if unsafe { &*f }.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
        // SAFETY: made by Box::into_raw in create_ep_factories; this was the last reference.
        drop(unsafe { Box::from_raw(f) });
    }
}

unsafe extern "C" fn get_name(_this: *const OrtEpFactory) -> *const c_char {
    guard_value("GetName", std::ptr::null(), || {
        // SAFETY: `_this` is our FactoryShell (ORT only calls us with the pointer we gave it).
        unsafe { &*(_this as *const FactoryShell) }.name.as_ptr()
    })
}

unsafe extern "C" fn get_vendor(this: *const OrtEpFactory) -> *const c_char {
    guard_value("GetVendor", std::ptr::null(), || {
        // SAFETY: as get_name.
        unsafe { &*(this as *const FactoryShell) }.vendor.as_ptr()
    })
}

unsafe extern "C" fn get_version(this: *const OrtEpFactory) -> *const c_char {
    guard_value("GetVersion", std::ptr::null(), || {
        // SAFETY: as get_name.
        unsafe { &*(this as *const FactoryShell) }.version.as_ptr()
    })
}

unsafe extern "C" fn get_vendor_id(_this: *const OrtEpFactory) -> u32 {
    guard_value("GetVendorId", VENDOR_ID, || VENDOR_ID)
}

unsafe extern "C" fn create_data_transfer(
    _this: *mut OrtEpFactory,
    out: *mut *mut OrtDataTransferImpl,
) -> StatusPtr {
    guard("CreateDataTransfer", || {
        // rcpu's device is host memory: nothing to copy, so no data-transfer implementation
        // (NULL is the documented "none"; ORT calls this member unconditionally).
        if !out.is_null() {
            // SAFETY: non-NULL out-pointer from ORT.
            unsafe { *out = std::ptr::null_mut() };
        }
        Ok(())
    })
}

unsafe extern "C" fn is_stream_aware(_this: *const OrtEpFactory) -> bool {
    guard_value("IsStreamAware", false, || false)
}

unsafe extern "C" fn get_supported_devices(
    this: *mut OrtEpFactory,
    devices: *const *const OrtHardwareDevice,
    num_devices: usize,
    ep_devices: *mut *mut OrtEpDevice,
    max_ep_devices: usize,
    num_ep_devices: *mut usize,
) -> StatusPtr {
    guard("GetSupportedDevices", || {
        if num_ep_devices.is_null() || (num_devices > 0 && devices.is_null()) {
            return Err(Error::invalid_argument(
                "GetSupportedDevices: NULL argument",
            ));
        }
        // SAFETY: non-NULL out-pointer.
        unsafe { *num_ep_devices = 0 };
        let a = api();
        for i in 0..num_devices {
            if max_ep_devices == 0 || ep_devices.is_null() {
                break;
            }
            // SAFETY: devices has num_devices entries.
            let hw = unsafe { *devices.add(i) };
            if hw.is_null()
                // SAFETY: hw is a non-NULL hardware device ORT passed in, live for this call.
                || unsafe { (a.ort.HardwareDevice_Type)(hw) }
                    != OrtHardwareDeviceType::OrtHardwareDeviceType_CPU
            {
                continue;
            }
            let mut dev: *mut OrtEpDevice = std::ptr::null_mut();
            // SAFETY: factory is ours; metadata/options may be NULL; ORT takes ownership of dev
            // once we return it.
            unsafe {
                check_raw((a.ep.create_ep_device)(
                    this,
                    hw,
                    std::ptr::null(),
                    std::ptr::null(),
                    &mut dev,
                ))?
            };
            // SAFETY: max_ep_devices >= 1 checked above.
            unsafe {
                *ep_devices = dev;
                *num_ep_devices = 1;
            }
            break; // one CPU device: rcpu spans the whole host CPU.
        }
        Ok(())
    })
}

unsafe extern "C" fn create_ep(
    this: *mut OrtEpFactory,
    _devices: *const *const OrtHardwareDevice,
    _metadata: *const *const OrtKeyValuePairs,
    num_devices: usize,
    session_options: *const OrtSessionOptions,
    logger: *const OrtLogger,
    out: *mut *mut OrtEp,
) -> StatusPtr {
    guard("CreateEp", || {
        if out.is_null() || this.is_null() {
            return Err(Error::invalid_argument("CreateEp: NULL argument"));
        }
        // SAFETY: non-NULL out-pointer.
        unsafe { *out = std::ptr::null_mut() };
        if num_devices != 1 {
            return Err(Error::invalid_argument(format!(
                "{EP_NAME} runs on exactly one CPU device, got {num_devices}"
            )));
        }
        // SAFETY: session options valid during CreateEp (not after: we copy what we need).
        let entries = unsafe { config_entries(session_options)? };
        // SAFETY: ORT's session logger outlives the EP.
        let logger = unsafe { Logger::new(logger) };
        let _route = logger.scope();
        let ep = super::ep::create(entries, logger)?;
        // The EP holds a reference to its factory until ReleaseEp. Relaxed: a new reference
        // is made from one the caller already holds (ORT's handle), as with Arc::clone.
        // SAFETY: ORT calls CreateEp with the live factory it got from us.
        unsafe { &*(this as *const FactoryShell) }
            .refs
            .fetch_add(1, Ordering::Relaxed);
        // SAFETY: non-NULL out-pointer; ORT releases through ReleaseEp.
        unsafe { *out = ep };
        Ok(())
    })
}

unsafe extern "C" fn release_ep(this: *mut OrtEpFactory, ep: *mut OrtEp) {
    guard_value("ReleaseEp", (), || {
        if ep.is_null() {
            return;
        }
        // SAFETY: ep was created by create_ep and is released exactly once.
        unsafe { super::ep::release(ep) };
        if !this.is_null() {
            // SAFETY: the EP held a reference to this factory since create_ep; it is given up
            // here, once, after the EP is gone.
            unsafe { unref(this as *mut FactoryShell) };
        }
    })
}

/// `CreateEpFactories`: negotiates the API and hands ORT one factory.
///
/// # Safety
/// Arguments as ORT passes them to a plugin's `CreateEpFactories`.
pub unsafe fn create_ep_factories(
    _registered_name: *const c_char,
    api_base: *const OrtApiBase,
    default_logger: *const OrtLogger,
    factories: *mut *mut OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> StatusPtr {
    log_bridge::install();
    if !num_factories.is_null() {
        // SAFETY: non-NULL out-pointer from the caller; zero factories until one is made.
        unsafe { *num_factories = 0 };
    }
    let negotiated = guard_value(
        "CreateEpFactories",
        Err("panic during API negotiation".to_string()),
        || {
            // SAFETY: api_base comes from ORT (or NULL, which negotiate rejects).
            unsafe { negotiate(api_base) }.map(|_| ())
        },
    );
    if let Err(msg) = negotiated {
        // Without a negotiated API we cannot build an OrtStatus through our own table; use
        // the runtime's oldest API (1) which every ORT keeps, if the base is usable.
        return refuse(api_base, &msg);
    }
    guard("CreateEpFactories", || {
        if factories.is_null() || num_factories.is_null() {
            return Err(Error::invalid_argument("CreateEpFactories: NULL argument"));
        }
        // SAFETY: non-NULL out-pointer.
        unsafe { *num_factories = 0 };
        if max_factories == 0 {
            return Err(Error::invalid_argument(
                "CreateEpFactories: no room for a factory",
            ));
        }
        let shell = Box::new(FactoryShell {
            base: factory_vtable(),
            name: CString::new(EP_NAME).expect("static name"),
            vendor: CString::new(VENDOR).expect("static vendor"),
            version: CString::new(VERSION).expect("crate version"),
            refs: AtomicUsize::new(1),
            default_logger,
        });
        // SAFETY: the environment's default logger outlives the factories ORT creates in it;
        // it is detached in `release_ep_factory`.
        unsafe { log_bridge::attach_default(default_logger) };
        // SAFETY: room for one factory checked above; ORT releases it via ReleaseEpFactory.
        unsafe {
            *factories = Box::into_raw(shell) as *mut OrtEpFactory;
            *num_factories = 1;
        }
        Ok(())
    })
}

fn factory_vtable() -> OrtEpFactory {
    OrtEpFactory {
        ort_version_supported: EP_ABI_VERSION,
        get_name: Some(get_name),
        get_vendor: Some(get_vendor),
        get_supported_devices: Some(get_supported_devices),
        create_ep: Some(create_ep),
        release_ep: Some(release_ep),
        get_vendor_id: Some(get_vendor_id),
        get_version: Some(get_version),
        validate_compiled_model_compatibility_info: None,
        create_allocator: None,
        release_allocator: None,
        create_data_transfer: Some(create_data_transfer),
        is_stream_aware: Some(is_stream_aware),
        create_sync_stream_for_device: None,
        get_hardware_device_incompatibility_details: None,
        create_external_resource_importer_for_device: None,
        get_num_custom_op_domains: None,
        get_custom_op_domains: None,
    }
}

/// Builds an error status through the runtime's API version 1 (present in every ORT) when
/// negotiation failed; NULL base -> no status can be built, print and return a non-NULL-free
/// failure is impossible, so we return NULL with zero factories.
fn refuse(api_base: *const OrtApiBase, msg: &str) -> StatusPtr {
    log::error!("{msg}");
    if api_base.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: api_base is a valid OrtApiBase from the runtime; GetApi(1) is always supported
    // and CreateStatus is the first slot of every OrtApi version.
    unsafe {
        let ort = ((*api_base).GetApi)(1);
        if ort.is_null() {
            return std::ptr::null_mut();
        }
        let m = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        ((*ort).CreateStatus)(ort_sys::OrtErrorCode::ORT_NOT_IMPLEMENTED, m.as_ptr()).0
    }
}

/// `ReleaseEpFactory`: drops ORT's reference. When EPs made by this factory still live (the
/// library is being unregistered before its sessions were released), the shell stays until the
/// last `ReleaseEp`, and the library is pinned in memory so that ORT's later calls into it (the
/// sessions' kernels, `ReleaseEp`) still find its code after ORT unloads it.
///
/// # Safety
/// `f` must be a factory returned by [`create_ep_factories`], released once.
pub unsafe fn release_ep_factory(f: *mut OrtEpFactory) -> StatusPtr {
    guard("ReleaseEpFactory", || {
        if f.is_null() {
            return Ok(());
        }
        let shell = f as *mut FactoryShell;
        // SAFETY: live shell; ORT still holds its reference until the unref below.
        let live_eps = unsafe { &*shell }.refs.load(Ordering::Acquire) - 1;
        if live_eps > 0 {
            let pinned = crate::os::pin_own_library();
            log::warn!(
                "{EP_NAME}: the library is released while {live_eps} EP(s) of it still live \
                 (unregister before releasing the sessions); keeping its factory and code \
                 mapped until process exit ({})",
                match pinned {
                    Ok(()) => "pinned".to_string(),
                    Err(e) => format!("pinning failed: {e}"),
                }
            );
        }
        // SAFETY: live shell (ORT's reference is given up only below).
        log_bridge::release_default(unsafe { &*shell }.default_logger);
        // SAFETY: ORT's reference, given up once.
        unsafe { unref(shell) };
        Ok(())
    })
}
