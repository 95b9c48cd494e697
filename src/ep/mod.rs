//! The EP's logic behind the ABI shells: fixed names, provider options, claim rules and the
//! table of registered kernels.

pub mod capability;
pub mod config;
pub mod ops;

use std::sync::Arc;

use crate::abi::log_bridge::Logger;
use crate::abi::status::{Error, Result};
use crate::kernels::op::KernelEnv;
use crate::runtime::{pool_for, PoolConfig};

pub use config::Config;

/// The EP name users select (fixed).
pub const EP_NAME: &str = "RcpuExecutionProvider";
/// Vendor string (fixed).
pub const VENDOR: &str = "rcpu";
/// PCI-style vendor id; 0 = generic (rcpu runs on any x86-64 CPU vendor).
pub const VENDOR_ID: u32 = 0;
/// The factory's version string: the crate version (semver).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// One EP instance (one per session): its configuration and the environment its kernels share.
pub struct EpInstance {
    pub config: Config,
    pub env: Arc<KernelEnv>,
    /// The session's ORT logger: ABI calls for this EP route their `log` records to it.
    pub logger: Logger,
}

impl EpInstance {
    /// Parses the provider options, configures the process-wide memory budgets and attaches
    /// to (or starts) the worker lanes for this configuration.
    pub fn new(entries: &[(String, String)], logger: Logger) -> Result<Self> {
        let config = Config::from_entries(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(Error::invalid_argument)?;
        crate::memory::configure(
            config.weight_cache_mb.map(|mb| mb << 20),
            config.accumulator_cache_mb.map(|mb| mb << 20),
        );
        let pool_cfg = PoolConfig {
            threads: config.threads,
            affinity: config.affinity.clone(),
            blocktime_us: config.blocktime_us,
        };
        crate::kernels::isa::log_choice_once();
        let lanes = pool_for(&pool_cfg);
        let env = Arc::new(KernelEnv::new(lanes));
        Ok(EpInstance {
            config,
            env,
            logger,
        })
    }
}
