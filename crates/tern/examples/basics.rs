//! The basics: open a database, write in a transaction, read a snapshot, walk a range, use a
//! table, reopen. Run with `cargo run --release -p tern --example basics [DIR]` (default: a
//! new temporary directory).

fn main() -> tern::Result<()> {
    let given = std::env::args().nth(1);
    let dir = match &given {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir().join(format!("tern-example-{}", std::process::id())),
    };
    let db = tern::Db::open(&dir, tern::Options::default())?;

    // Writes are atomic and durable once commit returns.
    let mut txn = db.begin()?;
    for (fruit, colour) in [("apple", "red"), ("banana", "yellow"), ("cherry", "dark red")] {
        txn.put(fruit.as_bytes(), colour.as_bytes())?;
    }
    txn.commit()?;

    // A read-only transaction sees one snapshot and takes no locks.
    let reader = db.begin_read()?;
    let mut cursor = reader.cursor(&b"b"[..]..)?; // from "b" on
    while let Some((key, value)) = cursor.next()? {
        println!("{} = {}", String::from_utf8_lossy(key), String::from_utf8_lossy(value));
    }
    drop(cursor);
    drop(reader);

    // Tables are separate key spaces.
    let prices = db.create_table("prices")?;
    let mut txn = db.begin()?;
    txn.put_in(&prices, b"apple", &120u32.to_be_bytes())?;
    txn.commit()?;
    db.close()?;

    // Everything committed is there after reopening.
    let db = tern::Db::open(&dir, tern::Options::default())?;
    let reader = db.begin_read()?;
    let prices = reader.table("prices")?;
    let cents = reader.get_in(&prices, b"apple")?.map(|v| u32::from_be_bytes(v[..4].try_into().unwrap_or([0; 4])));
    println!("apple costs {cents:?} cents; tables: {:?}", db.table_names());
    drop(reader);
    db.close()?;
    if given.is_none() {
        std::fs::remove_dir_all(&dir).ok(); // the temporary directory this run made
    }
    Ok(())
}
