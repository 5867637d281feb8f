//! Fuzz target: arbitrary bytes from a broker, after a real handshake, through sluice's
//! client (frame splitting, method and content decoding, content assembly, deliveries,
//! broker-initiated closes, cancels, flow and blocked notifications). Run with
//! `cargo fuzz run client_frames --fuzz-dir tests/fuzz`; interesting inputs go into
//! `tests/fuzz/corpus/client_frames`, which `tests/client_corpus.rs` replays on every
//! `cargo test`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../fake_broker.rs"]
mod fake_broker;

fuzz_target!(|data: &[u8]| {
    fake_broker::run(data);
});
