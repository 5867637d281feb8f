//! Fuzz target: arbitrary bytes through the frame splitter and every decoder a peer's
//! input reaches. Run with `cargo fuzz run frames --fuzz-dir tests/fuzz`; interesting
//! inputs go into `tests/fuzz/corpus/frames`, which `tests/frame_corpus.rs` replays on
//! every `cargo test`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sluice::protocol::check_input(data);
});
