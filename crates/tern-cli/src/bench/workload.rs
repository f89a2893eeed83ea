//! YCSB core workloads: the six presets (A–F), standard workload property files, and the
//! per-thread generators that turn a workload into operations and keys. One preset of tern's
//! own, `write1` (updates only, uniform), measures the one-key write transaction alone.
//!
//! A workload is a mix of five operation types (read, update, insert, scan, read-modify-write)
//! with proportions summing to 1, a request distribution over the records, and record sizes.
//! Presets follow YCSB's `workloads/workload[a-f]` files. Property files are parsed as YCSB
//! parses them (`name=value` lines, `#` comments); every property this driver does not act on
//! is reported by name instead of being dropped silently.
//!
//! Keys: record `i`'s key is the 8 bytes of `mix64(i)` (big-endian: keys sort by hash, which
//! spreads consecutive records over the key space like YCSB's hashed insert order) then `i`,
//! cut or zero-padded to the key size; `mix64` is a bijection, so keys are distinct for every
//! key size of at least 8 bytes. Values begin with `i` (little-endian), so every read is checked.

use super::dist::{mix64, scramble, SplitMix64, Zipfian, ZIPFIAN_THETA};
use std::collections::BTreeMap;

/// An operation type of the YCSB core workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Read, Op::Update, Op::Insert, Op::Scan, Op::ReadModifyWrite];

    /// The name used in reports (`read`, `update`, `insert`, `scan`, `rmw`).
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Update => "update",
            Op::Insert => "insert",
            Op::Scan => "scan",
            Op::ReadModifyWrite => "rmw",
        }
    }
}

/// How operations pick records (`requestdistribution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RequestDist {
    Uniform,
    /// Scrambled zipfian, theta 0.99: popular records spread over the key space.
    Zipfian,
    /// Zipfian over recency: the newest records are the most popular (workload D).
    Latest,
}

impl RequestDist {
    pub fn name(self) -> &'static str {
        match self {
            RequestDist::Uniform => "uniform",
            RequestDist::Zipfian => "zipfian",
            RequestDist::Latest => "latest",
        }
    }

    pub fn parse(s: &str) -> Result<RequestDist, String> {
        match s {
            "uniform" => Ok(RequestDist::Uniform),
            "zipfian" => Ok(RequestDist::Zipfian),
            "latest" => Ok(RequestDist::Latest),
            other => Err(format!("requestdistribution={other} is not supported (uniform, zipfian, latest)")),
        }
    }
}

/// A YCSB workload.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Workload {
    /// `a`..`f`, or the property file's name.
    pub name: String,
    /// Records loaded before the run (`recordcount`).
    pub records: u64,
    /// Operations in the run (`operationcount`), if the file sets it; otherwise the run is timed.
    pub operations: Option<u64>,
    /// Proportions of each operation type, in [`Op::ALL`] order.
    pub mix: [f64; 5],
    pub dist: RequestDist,
    /// Scan lengths are drawn from `min_scan..=max_scan`.
    pub min_scan: u64,
    pub max_scan: u64,
    /// Scan lengths zipfian (short scans popular) instead of uniform.
    pub scan_zipfian: bool,
    /// Value bytes per record (`fieldcount` × `fieldlength`: one value holds all fields).
    pub value_size: usize,
    /// Threads, if the file sets `threadcount`.
    pub threads: Option<usize>,
    /// Seconds, if the file sets `maxexecutiontime`.
    pub max_secs: Option<f64>,
    /// Properties read but not acted on, with why.
    pub unsupported: Vec<String>,
    /// Properties acted on differently from YCSB, with how.
    pub approximated: Vec<String>,
}

impl Workload {
    /// YCSB's core workload `a`..`f` with `records` records of `value_size`-byte values.
    pub fn preset(name: &str, records: u64, value_size: usize) -> Result<Workload, String> {
        let (mix, dist) = match name {
            "a" => ([0.5, 0.5, 0.0, 0.0, 0.0], RequestDist::Zipfian),
            "b" => ([0.95, 0.05, 0.0, 0.0, 0.0], RequestDist::Zipfian),
            "c" => ([1.0, 0.0, 0.0, 0.0, 0.0], RequestDist::Zipfian),
            "d" => ([0.95, 0.0, 0.05, 0.0, 0.0], RequestDist::Latest),
            "e" => ([0.0, 0.0, 0.05, 0.95, 0.0], RequestDist::Zipfian),
            "f" => ([0.5, 0.0, 0.0, 0.0, 0.5], RequestDist::Zipfian),
            // Not a YCSB preset: one put per transaction at uniformly random keys, the
            // one-key write path alone (each update is its own transaction on every engine).
            "write1" => ([0.0, 1.0, 0.0, 0.0, 0.0], RequestDist::Uniform),
            // Not YCSB presets: scans only, of one length, from uniformly random keys; `scanall`
            // reads the whole table from its first key.
            "scan1" | "scan10" | "scan100" | "scan1000" | "scanall" => {
                ([0.0, 0.0, 0.0, 1.0, 0.0], RequestDist::Uniform)
            }
            other => {
                return Err(format!(
                "unknown YCSB workload {other:?} (a, b, c, d, e, f, write1, scan1, scan10, scan100, scan1000, scanall)"
            ))
            }
        };
        let scan = match name {
            "scanall" => records.max(1),
            _ => name.strip_prefix("scan").and_then(|n| n.parse().ok()).unwrap_or(0),
        };
        let (min_scan, max_scan) = if scan > 0 { (scan, scan) } else { (1, 100) };
        Ok(Workload {
            name: name.to_string(),
            records,
            operations: None,
            mix,
            dist,
            min_scan,
            max_scan,
            scan_zipfian: false,
            value_size,
            threads: None,
            max_secs: None,
            unsupported: Vec::new(),
            approximated: Vec::new(),
        })
    }

    /// What the preset line of a report says: `read 95% insert 5%, latest`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = Op::ALL
            .iter()
            .zip(self.mix)
            .filter(|(_, p)| *p > 0.0)
            .map(|(op, p)| format!("{} {}%", op.name(), (p * 1000.0).round() / 10.0))
            .collect();
        let scan = if self.mix[3] > 0.0 {
            format!(", scans of {}..={} entries ({})", self.min_scan, self.max_scan, self.scan_dist_name())
        } else {
            String::new()
        };
        format!("{}, {}{scan}", parts.join(" "), self.dist.name())
    }

    fn scan_dist_name(&self) -> &'static str {
        if self.scan_zipfian {
            "zipfian"
        } else {
            "uniform"
        }
    }

    /// Parses a YCSB workload property file. `records`/`value_size` are the defaults for
    /// properties the file leaves out (YCSB's own defaults otherwise apply: all reads,
    /// uniform, 10 fields of 100 bytes unless the caller set a value size).
    pub fn from_properties(name: &str, text: &str) -> Result<Workload, String> {
        let mut props = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let Some((k, v)) = line.split_once('=').or_else(|| line.split_once(':')) else {
                return Err(format!("{name}:{}: expected `name=value`, got {line:?}", n + 1));
            };
            props.insert(k.trim().to_string(), v.trim().to_string());
        }
        Workload::from_map(name, &props)
    }

    fn from_map(name: &str, props: &BTreeMap<String, String>) -> Result<Workload, String> {
        let mut w = Workload::preset("c", 1000, 1000)?;
        w.name = name.to_string();
        w.mix = [0.95, 0.05, 0.0, 0.0, 0.0]; // YCSB CoreWorkload defaults
        w.dist = RequestDist::Uniform;
        w.max_scan = 1000;
        let (mut field_count, mut field_length) = (10u64, 100u64);
        for (k, v) in props {
            let num = |what: &str| -> Result<f64, String> {
                v.parse::<f64>().map_err(|_| format!("{name}: {k}={v} is not a number ({what})"))
            };
            let count = |what: &str| -> Result<u64, String> {
                v.parse::<u64>().map_err(|_| format!("{name}: {k}={v} is not a whole number ({what})"))
            };
            let proportion = |i: usize, w: &mut Workload| -> Result<(), String> {
                let p = num("a proportion")?;
                if !(0.0..=1.0).contains(&p) {
                    return Err(format!("{name}: {k}={v} must be in [0, 1]"));
                }
                w.mix[i] = p;
                Ok(())
            };
            match k.as_str() {
                "recordcount" => w.records = count("records")?,
                "operationcount" => w.operations = Some(count("operations")?),
                "readproportion" => proportion(0, &mut w)?,
                "updateproportion" => proportion(1, &mut w)?,
                "insertproportion" => proportion(2, &mut w)?,
                "scanproportion" => proportion(3, &mut w)?,
                "readmodifywriteproportion" => proportion(4, &mut w)?,
                "requestdistribution" => w.dist = RequestDist::parse(v).map_err(|e| format!("{name}: {e}"))?,
                "minscanlength" => w.min_scan = count("scan length")?,
                "maxscanlength" => w.max_scan = count("scan length")?,
                "scanlengthdistribution" => match v.as_str() {
                    "uniform" => w.scan_zipfian = false,
                    "zipfian" => w.scan_zipfian = true,
                    _ => return Err(format!("{name}: scanlengthdistribution={v} is not supported (uniform, zipfian)")),
                },
                "fieldcount" => field_count = count("fields")?,
                "fieldlength" => field_length = count("bytes")?,
                "threadcount" => w.threads = Some(count("threads")? as usize),
                "maxexecutiontime" => w.max_secs = Some(num("seconds")?),
                "workload" if v.ends_with("CoreWorkload") => {}
                "workload" => w.unsupported.push(format!("workload={v} (only CoreWorkload)")),
                // Names and formatting that change nothing measured.
                "table" | "fieldnameprefix" | "zeropadding" => {}
                "insertorder" if v == "hashed" => {}
                "readallfields" if v == "true" => {}
                "readallfields" => w.approximated.push(
                    "readallfields=false: reads return the whole record (one value per key holds every field)".into(),
                ),
                "writeallfields" => w.approximated.push(format!(
                    "writeallfields={v}: updates rewrite the whole record (one value per key holds every field)"
                )),
                "fieldlengthdistribution" if v == "constant" => {}
                _ => w.unsupported.push(format!("{k}={v}")),
            }
        }
        let total: f64 = w.mix.iter().sum();
        if (total - 1.0).abs() > 1e-6 {
            return Err(format!("{name}: operation proportions sum to {total}, not 1"));
        }
        if w.records == 0 {
            return Err(format!("{name}: recordcount must be positive"));
        }
        if w.min_scan == 0 || w.min_scan > w.max_scan {
            return Err(format!("{name}: scan lengths {}..={} are empty", w.min_scan, w.max_scan));
        }
        let value = field_count.checked_mul(field_length).filter(|&b| (8..=1 << 20).contains(&b));
        w.value_size = value.ok_or_else(|| {
            format!("{name}: fieldcount × fieldlength = {field_count} × {field_length} must be 8 B..1 MiB")
        })? as usize;
        Ok(w)
    }
}

/// Record `i`'s key (see the module doc), written into `out` (also the keys of `tern bench tree`).
#[inline]
pub fn key_of(i: u64, key_size: usize, out: &mut [u8]) -> &[u8] {
    out[..8].copy_from_slice(&mix64(i).to_be_bytes());
    let tail = i.to_be_bytes();
    for (j, b) in out[8..key_size].iter_mut().enumerate() {
        *b = tail.get(j).copied().unwrap_or(0);
    }
    &out[..key_size]
}

/// Sets `value`'s first bytes to record `i`'s tag (see [`check_value`]).
#[inline]
pub fn tag_value(i: u64, value: &mut [u8]) {
    let n = value.len().min(8);
    value[..n].copy_from_slice(&i.to_le_bytes()[..n]);
}

/// Whether `value` is one written for record `i` with `value_size` bytes.
#[inline]
pub fn check_value(i: u64, value: &[u8], value_size: usize) -> bool {
    let n = value_size.min(8);
    value.len() == value_size && value[..n] == i.to_le_bytes()[..n]
}

/// One thread's generator of operations and records.
pub struct Generator {
    rng: SplitMix64,
    /// Cumulative proportions in [`Op::ALL`] order.
    cumulative: [f64; 5],
    dist: RequestDist,
    /// Records the key distributions range over (the loaded ones).
    records: u64,
    zipf: Option<Zipfian>,
    scan_zipf: Option<Zipfian>,
    min_scan: u64,
    max_scan: u64,
}

impl Generator {
    pub fn new(w: &Workload, seed: u64) -> Generator {
        let mut cumulative = [0.0; 5];
        let mut sum = 0.0;
        for (c, p) in cumulative.iter_mut().zip(w.mix) {
            sum += p;
            *c = sum;
        }
        // Rounding never leaves a draw without an operation, nor gives one to a type of
        // proportion 0: the last type drawn at all takes everything above the others.
        if let Some(last) = w.mix.iter().rposition(|&p| p > 0.0) {
            cumulative[last] = f64::INFINITY;
        }
        let zipf = (w.dist != RequestDist::Uniform).then(|| Zipfian::new(w.records, ZIPFIAN_THETA));
        let span = w.max_scan - w.min_scan + 1;
        let scan_zipf = w.scan_zipfian.then(|| Zipfian::new(span, ZIPFIAN_THETA));
        Generator {
            rng: SplitMix64::new(mix64(seed)),
            cumulative,
            dist: w.dist,
            records: w.records,
            zipf,
            scan_zipf,
            min_scan: w.min_scan,
            max_scan: w.max_scan,
        }
    }

    /// The next operation type.
    #[inline]
    pub fn op(&mut self) -> Op {
        let u = self.rng.unit();
        let i = self.cumulative.iter().position(|&c| u < c).unwrap_or(0);
        Op::ALL[i]
    }

    /// The record an operation reads or updates, given that records `0..inserted` exist
    /// (`inserted` counts the loaded records plus the acknowledged inserts).
    #[inline]
    pub fn record(&mut self, inserted: u64) -> u64 {
        match (&self.zipf, self.dist) {
            (Some(z), RequestDist::Latest) => {
                // The newest record is rank 0; ranks beyond the oldest fold back in range.
                let rank = z.rank(self.rng.unit());
                inserted - 1 - rank.min(inserted - 1)
            }
            // Scrambled: a rank's hash picks the record, so the popular ones spread out.
            (Some(z), _) => scramble(z.rank(self.rng.unit())) % self.records,
            (None, _) => self.rng.below(self.records),
        }
    }

    /// The length of the next scan.
    #[inline]
    pub fn scan_length(&mut self) -> u64 {
        match &self.scan_zipf {
            Some(z) => self.min_scan + z.rank(self.rng.unit()),
            None => self.min_scan + self.rng.below(self.max_scan - self.min_scan + 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw_ops(w: &Workload, n: usize) -> [usize; 5] {
        let mut g = Generator::new(w, 11);
        let mut counts = [0; 5];
        for _ in 0..n {
            counts[g.op() as usize] += 1;
        }
        counts
    }

    #[test]
    fn every_preset_draws_its_mix() {
        let n = 200_000;
        for name in ["a", "b", "c", "d", "e", "f", "write1", "scan1", "scan10", "scan100", "scan1000", "scanall"] {
            let w = Workload::preset(name, 1000, 100).unwrap();
            let counts = draw_ops(&w, n);
            for (i, &p) in w.mix.iter().enumerate() {
                let share = counts[i] as f64 / n as f64;
                // 200k draws: the standard error of a 50% share is 0.11%; allow 5 of them.
                assert!((share - p).abs() < 0.006, "workload {name}, {:?}: {share} vs {p}", Op::ALL[i]);
                if p == 0.0 {
                    assert_eq!(counts[i], 0, "workload {name} never draws {:?}", Op::ALL[i]);
                }
            }
        }
        assert!(Workload::preset("g", 1, 1).is_err());
    }

    #[test]
    fn zipfian_requests_are_skewed_but_scrambled_and_uniform_ones_are_not() {
        let n = 10_000u64;
        let draws = 500_000;
        let counts = |dist: RequestDist| {
            let mut w = Workload::preset("c", n, 100).unwrap();
            w.dist = dist;
            let mut g = Generator::new(&w, 5);
            let mut c = vec![0u32; n as usize];
            for _ in 0..draws {
                c[g.record(n) as usize] += 1;
            }
            c
        };
        let zipf = counts(RequestDist::Zipfian);
        let mut sorted = zipf.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let top1pct: u32 = sorted[..(n / 100) as usize].iter().sum();
        // Theta 0.99 over 10k items: the top 1% draw about half of all requests.
        let share = f64::from(top1pct) / draws as f64;
        assert!((0.40..0.60).contains(&share), "zipfian top-1% share {share}");
        // Scrambled: the hottest record is not simply record 0, and the hot set is spread
        // across the record range (both halves hold many of the top 100).
        let hottest = (0..n as usize).max_by_key(|&i| zipf[i]).unwrap();
        assert_ne!(hottest, 0);
        let threshold = sorted[99];
        let low_half = (0..(n / 2) as usize).filter(|&i| zipf[i] >= threshold).count();
        assert!((20..80).contains(&low_half), "hot records in the lower half: {low_half}");
        // Uniform: every record drawn (50 expected each), the top 1% hold about 1%.
        let mut uni = counts(RequestDist::Uniform);
        assert!(uni.iter().all(|&c| c > 0), "uniform leaves no record out");
        uni.sort_unstable_by(|a, b| b.cmp(a));
        let share = f64::from(uni[..(n / 100) as usize].iter().sum::<u32>()) / draws as f64;
        assert!(share < 0.02, "uniform top-1% share {share}");
    }

    #[test]
    fn latest_favours_the_newest_records_as_they_arrive() {
        let w = Workload::preset("d", 10_000, 100).unwrap();
        let mut g = Generator::new(&w, 9);
        for inserted in [10_000u64, 12_345] {
            let draws = 100_000;
            let mut newest_10 = 0;
            for _ in 0..draws {
                let r = g.record(inserted);
                assert!(r < inserted);
                newest_10 += u32::from(r >= inserted - 10);
            }
            // Zipfian ranks 0..10 over 10k items: about 30% of draws.
            let share = f64::from(newest_10) / f64::from(draws);
            assert!((0.2..0.4).contains(&share), "newest 10 of {inserted}: {share}");
        }
    }

    #[test]
    fn scan_lengths_stay_in_range_and_follow_their_distribution() {
        let mut w = Workload::preset("e", 1000, 100).unwrap();
        let mut g = Generator::new(&w, 3);
        let lengths: Vec<u64> = (0..100_000).map(|_| g.scan_length()).collect();
        assert!(lengths.iter().all(|l| (1..=100).contains(l)));
        let mean = lengths.iter().sum::<u64>() as f64 / lengths.len() as f64;
        assert!((49.0..52.0).contains(&mean), "uniform 1..=100 mean {mean}");
        w.scan_zipfian = true;
        let mut g = Generator::new(&w, 3);
        let short = (0..100_000).filter(|_| g.scan_length() <= 10).count();
        assert!(short > 50_000, "zipfian scan lengths favour short scans: {short}");
    }

    #[test]
    fn property_files_are_parsed_and_unsupported_properties_named() {
        let text = "\
# Yahoo! Cloud System Benchmark, workload A
workload=site.ycsb.workloads.CoreWorkload
recordcount=5000
operationcount=20000
readallfields=true
readproportion=0.5
updateproportion=0.25
scanproportion=0.1
insertproportion=0.05
readmodifywriteproportion=0.1
requestdistribution=latest
maxscanlength=50
scanlengthdistribution=zipfian
fieldcount=4
fieldlength=25
writeallfields=false
hotspotdatafraction=0.2
measurementtype=histogram
threadcount=2
";
        let w = Workload::from_properties("mine", text).unwrap();
        assert_eq!(w.records, 5000);
        assert_eq!(w.operations, Some(20_000));
        assert_eq!(w.mix, [0.5, 0.25, 0.05, 0.1, 0.1]);
        assert_eq!(w.dist, RequestDist::Latest);
        assert_eq!((w.min_scan, w.max_scan, w.scan_zipfian), (1, 50, true));
        assert_eq!(w.value_size, 100);
        assert_eq!(w.threads, Some(2));
        assert_eq!(w.unsupported, ["hotspotdatafraction=0.2", "measurementtype=histogram"]);
        assert_eq!(w.approximated.len(), 1, "{:?}", w.approximated);
        assert!(w.approximated[0].starts_with("writeallfields=false"));
    }

    #[test]
    fn bad_property_files_get_clear_errors() {
        let err = |text: &str| Workload::from_properties("w", text).unwrap_err();
        assert!(err("readproportion=0.5\nupdateproportion=0.2\n").contains("sum to 0.7"));
        assert!(err("recordcount=many\n").contains("recordcount=many is not a whole number"));
        assert!(err("requestdistribution=hotspot\n").contains("hotspot is not supported"));
        assert!(err("just words\n").contains("w:1: expected `name=value`"));
        assert!(err("readproportion=1.5\n").contains("must be in [0, 1]"));
        assert!(err("fieldcount=0\n").contains("fieldcount × fieldlength"));
        assert!(err("maxscanlength=0\n").contains("scan lengths"));
        // Defaults are YCSB's: 95% reads, 5% updates, uniform, 10 × 100-byte fields.
        let w = Workload::from_properties("w", "").unwrap();
        assert_eq!((w.mix[0], w.mix[1], w.dist, w.value_size), (0.95, 0.05, RequestDist::Uniform, 1000));
    }

    #[test]
    fn keys_are_distinct_sized_and_values_checkable() {
        let mut buf = [0u8; 64];
        let mut seen = std::collections::HashSet::new();
        for size in [8, 16, 24] {
            for i in 0..1000 {
                let k = key_of(i, size, &mut buf).to_vec();
                assert_eq!(k.len(), size);
                assert!(seen.insert(k));
            }
        }
        let mut v = vec![0u8; 100];
        tag_value(77, &mut v);
        assert!(check_value(77, &v, 100));
        assert!(!check_value(78, &v, 100));
        assert!(!check_value(77, &v[..99], 100));
    }
}
