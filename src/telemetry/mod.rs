//! Counters, the dispatch ledger and the stats JSON.
