//! Admission and a thread with two write transactions open, the first begun before admission
//! engaged (so without a ticket): the second must not wait for a ticket, since the ticket's
//! holder may be waiting for the first one's lock. Alone in its binary: admission engages on
//! the count of the process's transaction threads, which other tests would change.

use std::sync::mpsc;
use std::thread;
use tern::{Db, Error, Options};

#[test]
fn a_second_write_transaction_on_a_thread_never_waits_for_a_ticket() {
    let db = Db::open_temporary(Options { write_tickets: 1, ..Options::default() }).unwrap();
    // One transaction thread (this one): not more than the one ticket, so no ticket taken.
    let mut first = db.begin().unwrap();
    first.put(b"k", b"first").unwrap();
    // A second transaction thread: now admission engages. It takes the only ticket, then
    // waits for the first transaction's lock on "k".
    let (ticketed_tx, ticketed) = mpsc::channel();
    let d = db.clone();
    let holder = thread::spawn(move || {
        // Counted among the transaction threads from its first transaction on.
        d.begin_read().unwrap().commit().unwrap();
        let mut t = d.begin().unwrap();
        ticketed_tx.send(()).unwrap();
        match t.put(b"k", b"holder") {
            Ok(()) => t.commit(),
            Err(e) => Err(e),
        }
    });
    ticketed.recv().unwrap();
    let before = db.stats().admission.unwrap();
    // Waiting for a ticket here would wait on the holder, which waits on `first`.
    let mut second = db.begin().unwrap();
    second.put(b"other", b"second").unwrap();
    second.commit().unwrap();
    let after = db.stats().admission.unwrap();
    assert_eq!((after.waits, after.stalls), (before.waits, before.stalls), "the second transaction waited");
    first.commit().unwrap();
    match holder.join().unwrap() {
        Ok(()) | Err(Error::Conflict) => {}
        Err(e) => panic!("holder: {e:?}"),
    }
}
