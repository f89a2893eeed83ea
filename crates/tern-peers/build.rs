//! Builds the C shims of the peer engines when the `peers` feature is on, after checking that
//! their headers are installed (with a message saying how to install them if not).

fn main() {
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_PEERS");
    if std::env::var_os("CARGO_FEATURE_PEERS").is_none() {
        return;
    }
    let engines = [
        ("LMDB", "lmdb.h", "liblmdb-dev", "lmdb_shim.c", "lmdb"),
        ("WiredTiger", "wiredtiger.h", "libwiredtiger-dev", "wiredtiger_shim.c", "wiredtiger"),
        ("Berkeley DB", "db.h", "libdb-dev", "bdb_shim.c", "db"),
        ("RocksDB", "rocksdb/c.h", "librocksdb-dev", "rocksdb_shim.c", "rocksdb"),
    ];
    let include_dirs = ["/usr/include", "/usr/local/include"];
    let missing: Vec<String> = engines
        .iter()
        .filter(|(_, header, ..)| !include_dirs.iter().any(|d| std::path::Path::new(d).join(header).exists()))
        .map(|(name, header, package, ..)| format!("{name} ({header}, Debian package {package})"))
        .collect();
    if !missing.is_empty() {
        panic!(
            "\n\ntern-peers: the `peers` feature needs the C libraries of the peer engines, and these are \
             missing: {}.\nInstall them with `scripts/install-peers.sh` (Debian/Ubuntu), or build without \
             `--features peers`.\n\n",
            missing.join(", ")
        );
    }
    let mut build = cc::Build::new();
    build.include("csrc").warnings(true).extra_warnings(true).flag_if_supported("-Wno-unused-parameter");
    if let Some(v) = rocksdb_version(&include_dirs) {
        build.define("TERN_ROCKSDB_VERSION", format!("\"{v}\"").as_str());
    }
    for (.., shim, _) in engines {
        build.file(format!("csrc/{shim}"));
    }
    build.compile("tern_peer_shims");
    for (.., lib) in engines {
        println!("cargo:rustc-link-lib={lib}");
    }
}

/// RocksDB's version from its (C++) `rocksdb/version.h`, as "major.minor.patch".
fn rocksdb_version(include_dirs: &[&str]) -> Option<String> {
    let text = include_dirs.iter().find_map(|d| std::fs::read_to_string(format!("{d}/rocksdb/version.h")).ok())?;
    let field = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix("#define ")?.strip_prefix(name)?.trim().parse::<u32>().ok())
    };
    Some(format!("{}.{}.{}", field("ROCKSDB_MAJOR ")?, field("ROCKSDB_MINOR ")?, field("ROCKSDB_PATCH ")?))
}
