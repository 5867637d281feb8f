//! Replays the client fuzz corpus (`tests/fuzz/corpus/client_frames`) through sluice's
//! client against a scripted broker (`tests/fuzz/fake_broker.rs`), so the inputs the
//! `client_frames` fuzz target found stay covered by a plain `cargo test`: every input
//! ends with a value or an error, never a panic or a hang.

use std::fs;
use std::path::Path;

#[path = "fuzz/fake_broker.rs"]
mod fake_broker;

#[test]
fn client_corpus_never_panics_the_client() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus/client_frames");
    let mut replayed = 0;
    for entry in fs::read_dir(&dir).expect("corpus directory exists") {
        let path = entry.expect("corpus entry").path();
        let data = fs::read(&path).expect("corpus file readable");
        fake_broker::run(&data);
        // A peer may stop anywhere: a cut in the middle of the input too.
        fake_broker::run(&data[..data.len() / 2]);
        replayed += 1;
    }
    // The harness really delivers: a well-formed message arrives, nineteen arrive.
    let one = fs::read(dir.join("one_delivery")).expect("seed one_delivery");
    assert_eq!(fake_broker::run(&one), 1);
    let many = fs::read(dir.join("many")).expect("seed many");
    assert_eq!(fake_broker::run(&many), 19);
    assert!(
        replayed >= 10,
        "the seed corpus has at least 10 inputs, found {replayed}"
    );
}
