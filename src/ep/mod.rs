//! The EP's logic behind the ABI shells: fixed names, provider options, claim rules, the
//! contract of a node kernel ([`op`]), the node kernels themselves ([`nodes`]) and the table of
//! registered kernels ([`ops`]). Safe code over the `abi` views, calling the pure compute in
//! `crate::kernels`.

pub mod capability;
pub mod config;
pub mod context;
pub mod fusion;
pub mod mixed;
pub mod nodes;
pub mod op;
pub mod ops;
pub mod partition;
pub mod spec;

use std::sync::Arc;

use crate::abi::log_bridge::Logger;
use crate::abi::status::{Error, Result};
use crate::ep::op::KernelEnv;
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
    /// Whether ORT's intra-op pool spins in this session, and whether the advice about heavy
    /// nodes left to ORT next to rcpu's lanes was given (`mixed.rs`).
    pub mixed: mixed::MixedAdvice,
    /// What the session asks of EPContext models (`ep::context`).
    pub context: context::ContextOptions,
    /// Context files this session has written (each `Compile` call writes its own).
    pub context_files: std::sync::atomic::AtomicUsize,
}

impl EpInstance {
    /// Parses the provider options, configures the process-wide memory budgets and attaches
    /// to (or starts) the worker lanes for this configuration.
    pub fn new(entries: &[(String, String)], logger: Logger) -> Result<Self> {
        let config = Config::from_entries(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(Error::invalid_argument)?;
        crate::memory::configure(
            config.weight_cache_mb.map(|mb| mb << 20),
            config.scratch_cache_mb.map(|mb| mb << 20),
        );
        let pool_cfg = PoolConfig {
            threads: config.threads,
            affinity: config.affinity.clone(),
            blocktime_us: config.blocktime_us,
        };
        crate::kernels::isa::log_choice_once();
        // RCPU_PAR=ort (diagnostics, issue 17): rcpu's chunks run on ORT's intra-op pool.
        let par: Arc<dyn crate::runtime::Par + Send + Sync> =
            if std::env::var("RCPU_PAR").is_ok_and(|v| v == "ort") {
                Arc::new(crate::abi::ort_pool::OrtPoolPar::new(config.threads))
            } else {
                pool_for(&pool_cfg)
            };
        let env = Arc::new(KernelEnv {
            acc4_f16_scales: config.acc4_scales == config::Acc4Scales::F16,
            step_times: config.step_times,
            ..KernelEnv::new(par)
        });
        let mixed = mixed::MixedAdvice::new(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let context = context::ContextOptions::from_entries(
            entries.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )?;
        Ok(EpInstance {
            config,
            env,
            logger,
            mixed,
            context,
            context_files: std::sync::atomic::AtomicUsize::new(0),
        })
    }
}
