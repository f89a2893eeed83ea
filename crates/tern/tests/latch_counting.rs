//! Acquisition counting is off by default and switches at run time. A test binary of its own:
//! the switch is process-wide, and other tests switch it on.

use tern::sync::{class_stats, counts_acquisitions, set_count_acquisitions, HybridLatch, LatchClass, Mutex, RwLatch};
use tern::{Db, Options};

#[test]
fn acquisitions_are_counted_only_while_switched_on_and_page_fixes_always() {
    let class = LatchClass::register("test.counting").unwrap();
    let m = Mutex::with_class(0u64, class);
    let rw = RwLatch::with_class(0u64, class);
    let h = HybridLatch::with_class(0u64, class);
    let touch_all = || {
        *m.lock() += 1;
        drop(rw.read());
        *rw.write() += 1;
        let g = h.optimistic();
        assert!(g.validate().is_ok());
    };

    assert!(!counts_acquisitions(), "off by default");
    let before = class_stats(class);
    touch_all();
    let off = class_stats(class).since(&before);
    assert_eq!((off.acquisitions, off.optimistic), (0, 0), "nothing counted while off: {off:?}");

    // The buffer pool's fixes are its hit statistics: counted with the switch off.
    let db = Db::open_temporary(Options::default()).unwrap();
    let mut t = db.begin().unwrap();
    t.put(b"k", b"v").unwrap();
    t.commit().unwrap();
    let before_fixes = db.stats().buffer.fixes;
    for _ in 0..10 {
        assert_eq!(db.begin().unwrap().get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    }
    let fixes = db.stats().buffer.fixes - before_fixes;
    assert!(fixes >= 10, "every lookup fixes at least its leaf: {fixes}");

    set_count_acquisitions(true);
    assert!(counts_acquisitions());
    let before = class_stats(class);
    touch_all();
    let on = class_stats(class).since(&before);
    assert_eq!((on.acquisitions, on.optimistic), (3, 1), "one per acquisition and validation while on: {on:?}");

    set_count_acquisitions(false);
    let before = class_stats(class);
    *m.lock() += 1;
    assert_eq!(class_stats(class).since(&before).acquisitions, 0, "off again");
    assert_eq!(*m.lock(), 3);
}
