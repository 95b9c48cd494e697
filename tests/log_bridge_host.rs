//! A Rust program that links rcpu and installed its own `log` logger keeps it: rcpu's bridge
//! to ORT's logger does not replace it, installing is idempotent, and rcpu's records reach the
//! host's logger. (Its own test binary: a `log` logger is set once per process.)

use std::sync::Mutex;

use log::{Level, LevelFilter, Log, Metadata, Record};
use rcpu::abi::log_bridge::{install, Installed};

struct Host(Mutex<Vec<String>>);

impl Log for Host {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &Record<'_>) {
        let line = format!("{} {}", record.level(), record.args());
        self.0.lock().unwrap().push(line);
    }
    fn flush(&self) {}
}

static HOST: Host = Host(Mutex::new(Vec::new()));

#[test]
fn host_logger_is_kept() {
    log::set_logger(&HOST).expect("the first logger of this process");
    log::set_max_level(LevelFilter::Info);
    assert_eq!(install(), Installed::HostLogger);
    assert_eq!(install(), Installed::HostLogger, "idempotent");
    // An rcpu record (the ISA choice) goes to the host's logger.
    rcpu::kernels::isa::log_choice_once();
    let got = HOST.0.lock().unwrap().clone();
    assert!(
        got.iter()
            .any(|l| l.starts_with(&Level::Info.to_string()) && l.contains("ISA level")),
        "{got:?}"
    );
}
