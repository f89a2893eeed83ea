//! Acquisition counting is off by default and switches at run time. A test binary of its own:
//! the switch is process-wide, and other tests switch it on.

use tern::sync::{class_stats, counts_acquisitions, set_count_acquisitions, LatchClass, Mutex, RwLatch};

#[test]
fn acquisitions_are_counted_only_while_switched_on() {
    let class = LatchClass::register("test.counting").unwrap();
    let m = Mutex::with_class(0u64, class);
    let rw = RwLatch::with_class(0u64, class);

    assert!(!counts_acquisitions(), "off by default");
    let before = class_stats(class);
    *m.lock() += 1;
    drop(rw.read());
    *rw.write() += 1;
    let off = class_stats(class).since(&before);
    assert_eq!(off.acquisitions, 0, "nothing counted while off: {off:?}");

    set_count_acquisitions(true);
    assert!(counts_acquisitions());
    let before = class_stats(class);
    *m.lock() += 1;
    drop(rw.read());
    *rw.write() += 1;
    assert_eq!(class_stats(class).since(&before).acquisitions, 3, "one per acquisition while on");

    set_count_acquisitions(false);
    let before = class_stats(class);
    *m.lock() += 1;
    assert_eq!(class_stats(class).since(&before).acquisitions, 0, "off again");
    assert_eq!(*m.lock(), 3);
}
