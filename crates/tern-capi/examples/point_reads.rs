//! Point reads through the Rust API: the baseline `scripts/bindings-bench.sh` compares the C
//! interface with (same database, keys and loop as `point_reads.c`).
//!
//! Usage: `point_reads DIR RECORDS READS`. Loads RECORDS keys (8-byte big-endian integers,
//! 100-byte values) if DIR is new, then reads READS random keys in one read transaction
//! (`get_into`, into one reused buffer) and prints `rust <reads> <seconds> <ns per read>`.

use std::time::Instant;

fn main() -> tern::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (dir, records, reads) = match &args[1..] {
        [d, r, n] => (d.clone(), r.parse::<u64>().expect("RECORDS"), n.parse::<u64>().expect("READS")),
        _ => {
            eprintln!("usage: point_reads DIR RECORDS READS");
            std::process::exit(2);
        }
    };
    let fresh = !std::path::Path::new(&dir).exists();
    let db = tern::Db::open(&dir, tern::Options::default())?;
    if fresh {
        let value = [7u8; 100];
        for chunk in (0..records).collect::<Vec<_>>().chunks(10_000) {
            let mut txn = db.begin()?;
            for &k in chunk {
                txn.put(&k.to_be_bytes(), &value)?;
            }
            txn.commit()?;
        }
    }
    let txn = db.begin_read()?;
    let mut out = Vec::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut found = 0u64;
    let start = Instant::now();
    for _ in 0..reads {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = (x % records).to_be_bytes();
        found += u64::from(txn.get_into(&key, &mut out)?);
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(found, reads, "every key was loaded");
    println!("rust {reads} {secs:.4} {:.1}", secs * 1e9 / reads as f64);
    drop(txn);
    db.close()
}
