//! Latch class registration limits. A test binary of its own: it fills the process-wide class
//! table, which would disturb other tests sharing a process.

use tern::sync::{LatchClass, MAX_CLASSES};
use tern::Error;

const NAMES: [&str; MAX_CLASSES] = {
    let mut names = [""; MAX_CLASSES];
    let all = [
        "c00", "c01", "c02", "c03", "c04", "c05", "c06", "c07", "c08", "c09", "c10", "c11", "c12", "c13", "c14", "c15",
        "c16", "c17", "c18", "c19", "c20", "c21", "c22", "c23", "c24", "c25", "c26", "c27", "c28", "c29", "c30", "c31",
    ];
    let mut i = 0;
    while i < MAX_CLASSES {
        names[i] = all[i];
        i += 1;
    }
    names
};

#[test]
fn the_class_table_fills_up_with_a_clear_error_and_keeps_working() {
    // `default` takes one entry; the rest fit.
    let classes: Vec<LatchClass> = NAMES[..MAX_CLASSES - 1].iter().map(|n| LatchClass::register(n).unwrap()).collect();
    match LatchClass::register("one-too-many") {
        Err(Error::TooManyLatchClasses { name, max }) => {
            assert_eq!(name, "one-too-many");
            assert_eq!(max, MAX_CLASSES);
        }
        other => panic!("expected TooManyLatchClasses, got {other:?}"),
    }
    let message = LatchClass::register("one-too-many").unwrap_err().to_string();
    assert!(message.contains("one-too-many") && message.contains(&MAX_CLASSES.to_string()), "{message}");
    // Existing names still resolve, and their latches still work and count.
    tern::sync::set_count_acquisitions(true);
    assert_eq!(LatchClass::register(NAMES[3]).unwrap(), classes[3]);
    let m = tern::sync::Mutex::with_class(1, classes[MAX_CLASSES - 2]);
    *m.lock() += 1;
    assert_eq!(*m.lock(), 2);
    let stats = tern::stats::snapshot();
    let mine = stats.latches.iter().find(|s| s.class == NAMES[MAX_CLASSES - 2]).unwrap();
    assert_eq!(mine.acquisitions, 2);
}
