//! Replays the fuzz corpus (`tests/fuzz/corpus/frames`) through every decoder a peer's
//! bytes reach, so inputs the fuzzer found stay covered by a plain `cargo test`. (Live
//! broker behaviour on bad input is covered by `tests/protocol_errors.rs`.)

use std::fs;
use std::path::Path;

#[test]
fn corpus_never_panics_the_decoders() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus/frames");
    let mut replayed = 0;
    for entry in fs::read_dir(&dir).expect("corpus directory exists") {
        let path = entry.expect("corpus entry").path();
        let data = fs::read(&path).expect("corpus file readable");
        sluice::protocol::check_input(&data);
        // Every prefix too: a peer may stop anywhere.
        for cut in 0..data.len() {
            sluice::protocol::check_input(&data[..cut]);
        }
        replayed += 1;
    }
    assert!(
        replayed >= 10,
        "the seed corpus has at least 10 inputs, found {replayed}"
    );
}
