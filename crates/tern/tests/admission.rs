//! Admission of write transactions (`Options::write_tickets`): what the rustdoc promises, through
//! the public API. Every test that could hang on a wrong gate runs under a watchdog.

use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;
use tern::{Db, Options};

/// Runs `f` on a thread; fails the test if it has not returned within `secs`.
fn within(secs: u64, what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => t.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => t.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: still waiting after {secs} s"),
    }
}

fn db(tickets: usize) -> Db {
    Db::open_temporary(Options { write_tickets: tickets, ..Options::default() }).unwrap()
}

/// Keeps `n` threads alive that have each run a transaction (admission engages only while the
/// process's transaction threads outnumber the tickets); drop the result to let them go.
struct Crowd {
    release: Arc<Barrier>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Crowd {
    fn new(db: &Db, n: usize) -> Crowd {
        let (started, release) = (Arc::new(Barrier::new(n + 1)), Arc::new(Barrier::new(n + 1)));
        let threads = (0..n)
            .map(|_| {
                let (db, started, release) = (db.clone(), started.clone(), release.clone());
                thread::spawn(move || {
                    db.begin_read().unwrap().commit().unwrap();
                    started.wait();
                    release.wait();
                })
            })
            .collect();
        started.wait();
        Crowd { release, threads }
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        self.release.wait();
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }
}

#[test]
fn a_thread_running_two_write_transactions_at_once_does_not_wait_on_itself() {
    let db = db(1);
    let _crowd = Crowd::new(&db, 3);
    let d = db.clone();
    within(20, "two write transactions on one thread, one ticket", move || {
        let mut a = d.begin().unwrap();
        a.put(b"a", b"1").unwrap();
        let mut b = d.begin().unwrap();
        b.put(b"b", b"2").unwrap();
        b.commit().unwrap();
        a.commit().unwrap();
    });
    let r = db.begin_read().unwrap();
    assert_eq!(r.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(r.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
}

#[test]
fn writers_get_in_while_long_transactions_hold_every_ticket() {
    // Two tickets, both held by transactions that stay open until the other writers are done:
    // if admission waited for a ticket to come back, this would never end.
    let db = db(2);
    let _crowd = Crowd::new(&db, 4);
    let d = db.clone();
    within(60, "writers behind long transactions", move || {
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let holding = Arc::new(Barrier::new(3));
        let done_rx = Arc::new(std::sync::Mutex::new(done_rx));
        let long: Vec<_> = (0..2)
            .map(|i| {
                let (d, holding, done_rx) = (d.clone(), holding.clone(), done_rx.clone());
                thread::spawn(move || {
                    let mut t = d.begin().unwrap();
                    t.put(format!("long{i}").as_bytes(), b"x").unwrap();
                    holding.wait();
                    done_rx.lock().unwrap().recv().unwrap();
                    t.commit().unwrap();
                })
            })
            .collect();
        holding.wait();
        let writers: Vec<_> = (0..3)
            .map(|w| {
                let d = d.clone();
                thread::spawn(move || {
                    for i in 0..20u32 {
                        let mut t = d.begin().unwrap();
                        t.put(format!("w{w}-{i}").as_bytes(), b"v").unwrap();
                        t.commit().unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        done_tx.send(()).unwrap();
        done_tx.send(()).unwrap();
        for t in long {
            t.join().unwrap();
        }
        let stats = d.stats().admission.expect("admission is on");
        assert!(stats.stalls >= 1, "the writers got in by the stall door: {stats:?}");
    });
    assert_eq!(db.begin_read().unwrap().range(..).unwrap().count(), 2 + 3 * 20);
}

#[test]
fn many_writers_through_one_ticket_lose_no_update() {
    let db = db(1);
    let d = db.clone();
    within(120, "8 writers, one ticket", move || {
        let mut t = d.begin().unwrap();
        t.put(b"counter", &0u64.to_le_bytes()).unwrap();
        t.commit().unwrap();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || {
                    for _ in 0..300 {
                        loop {
                            let mut t = d.begin().unwrap();
                            let v = t.get_for_update(b"counter").unwrap().unwrap();
                            let n = u64::from_le_bytes(v[..8].try_into().unwrap());
                            t.put(b"counter", &(n + 1).to_le_bytes()).unwrap();
                            if t.commit().is_ok() {
                                break;
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    });
    let v = db.begin_read().unwrap().get(b"counter").unwrap().unwrap();
    assert_eq!(u64::from_le_bytes(v[..8].try_into().unwrap()), 2400);
    assert_eq!(db.stats().admission.map(|a| a.tickets), Some(1));
}

#[test]
fn zero_write_tickets_turn_admission_off() {
    assert!(db(0).stats().admission.is_none());
    let cpus = thread::available_parallelism().map_or(4, |n| n.get());
    assert_eq!(Options::default().write_tickets, cpus);
    assert_eq!(db(3).stats().admission.map(|a| a.tickets), Some(3));
}
