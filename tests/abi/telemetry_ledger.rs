//! The route ledger (`telemetry::ledger`) that MatMulNBits and the other ops record into.

/// The lock-free ledger counts every call of a route across threads and merges routes of equal content
/// (its per-call cost: `cargo run --release --example matmul_nbits_rates ledger`).
#[test]
fn ledger_counts_and_merges() {
    use rcpu::telemetry::ledger;
    let op: &'static str = "NbitsLedgerTestOp";
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..10_000 {
                    ledger::record(op, "v1", 2);
                }
            });
        }
    });
    // Same content at another address (a heap string leaked to 'static) merges into one row.
    let v1_other: &'static str = Box::leak(String::from("v1").into_boxed_str());
    ledger::record(op, v1_other, 2);
    ledger::record(op, "v2", 2);
    let rows: Vec<_> = ledger::rows()
        .into_iter()
        .filter(|r| r.route.op == op)
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!((rows[0].route.variant, rows[0].calls), ("v1", 40_001));
    assert_eq!((rows[1].route.variant, rows[1].calls), ("v2", 1));
    assert_eq!(ledger::calls_for(op), 40_002);
}
