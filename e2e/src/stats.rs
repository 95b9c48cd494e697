//! Reads `RcpuEp_StatsJson` from the plugin ORT loaded (dlopen of the same path returns the same
//! library instance, so the counters are the ones the sessions update).

use std::ffi::c_char;

use crate::ort::Res;

/// Handle to the plugin's own exports.
pub struct PluginStats {
    lib: libloading::Library,
}

impl PluginStats {
    pub fn open() -> Res<PluginStats> {
        let p = crate::paths::plugin()?;
        // SAFETY: loading the plugin ORT already loaded (refcount bump, no re-initialisation).
        let lib = unsafe { libloading::Library::new(&p) }.map_err(|e| e.to_string())?;
        Ok(PluginStats { lib })
    }

    /// The stats document.
    pub fn json(&self) -> Res<serde_json::Value> {
        // SAFETY: signature as declared in include/rcpu_ep.h.
        let f: libloading::Symbol<unsafe extern "C" fn(*mut c_char, usize) -> usize> =
            unsafe { self.lib.get(b"RcpuEp_StatsJson\0") }.map_err(|e| e.to_string())?;
        // SAFETY: NULL/0 asks for the size only.
        let mut cap = unsafe { f(std::ptr::null_mut(), 0) } + 1024;
        // Other threads may add ledger rows between the calls: grow and retry until it fits.
        for _ in 0..8 {
            let mut buf = vec![0u8; cap];
            // SAFETY: buf has cap writable bytes.
            let m = unsafe { f(buf.as_mut_ptr() as *mut c_char, buf.len()) };
            if m < cap {
                return serde_json::from_slice(&buf[..m]).map_err(|e| e.to_string());
            }
            cap = m + 1024;
        }
        Err("stats JSON kept growing while being read".into())
    }

    /// Clears the ledger and pool counters.
    pub fn reset(&self) -> Res<()> {
        // SAFETY: signature as declared in include/rcpu_ep.h.
        let f: libloading::Symbol<unsafe extern "C" fn()> =
            unsafe { self.lib.get(b"RcpuEp_ResetStats\0") }.map_err(|e| e.to_string())?;
        // SAFETY: no arguments.
        unsafe { f() };
        Ok(())
    }

    /// Calls recorded in the ledger for `op` (0 = the route never ran).
    pub fn calls(&self, op: &str) -> Res<u64> {
        let j = self.json()?;
        Ok(j["ledger"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .filter(|r| r["op"] == op)
                    .map(|r| r["calls"].as_u64().unwrap_or(0))
                    .sum()
            })
            .unwrap_or(0))
    }
}
