//! `tern bench latch`: tern's latches against `std` and `parking_lot`, under each spin policy.

use super::harness::{run_threads, Control, LatencySampler, Sample, ThreadResult};
use super::report::{emit, Record};
use super::runner::{self, Case, RunFn};
use super::work;
use super::Common;
use clap::{Args, ValueEnum};
use crossbeam_utils::CachePadded;
use serde_json::{json, Value};
use std::time::Instant;
use tern::sync::{class_stats, LatchClass, LatchStats, Mutex, RwLatch, SpinConfig, SpinPolicy};

const LONG_ABOUT: &str = "\
Measures latch throughput: every thread loops acquire -> critical section -> release -> think.

Exclusive mode compares std::sync::Mutex, parking_lot::Mutex and tern's Mutex under each spin
policy (tern-pause, tern-yield, tern-park, tern-adaptive); the baseline is parking_lot. Named in
--variants, tern-counted is the default policy with acquisition counting switched on
(tern::sync::set_count_acquisitions, off by default): what counting costs. Shared
mode compares std::sync::RwLock, parking_lot::RwLock, tern's RwLatch (reader-biased, BRAVO) and
tern-nobias (RwLatch with the bias off), with read-only and writer mixes; the baseline is std.

The critical section is calibrated busy work (--cs-ns) on data the latch protects; the final data
is checked, so a broken latch fails the run. One acquisition in --sample-every is timed: p50/p99/
p99.9 are the time to acquire. Fairness is the least over the most operations of any thread
(1.00 = equal shares). Thread counts above the core count are on purpose: oversubscription is
where spin policies differ most.

Variants of one point run interleaved, once per round, rotating the order each round; ops/s is
the median round, 'vs base' the median of per-round ratios to the baseline, 'vs 1T' the ratio to
the same variant at one thread.";

/// Which latch modes to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Mutexes.
    Exclusive,
    /// Reader-writer latches.
    Shared,
}

/// Options of `tern bench latch`.
#[derive(Args, Clone, Debug)]
#[command(about = "Latch throughput, fairness and acquire latency: tern vs std vs parking_lot", long_about = LONG_ABOUT)]
pub struct LatchArgs {
    #[command(flatten)]
    pub common: Common,
    /// Modes to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "exclusive,shared")]
    pub mode: Vec<Mode>,
    /// Critical-section lengths to measure, in nanoseconds of busy work inside the latch.
    #[arg(long = "cs-ns", value_delimiter = ',', default_value = "0,100", value_name = "NS,...")]
    pub cs_ns: Vec<u64>,
    /// Busy work between acquisitions, in nanoseconds.
    #[arg(long = "think-ns", default_value_t = 0, value_name = "NS")]
    pub think_ns: u64,
    /// Shared mode: percentages of operations that write, comma separated.
    #[arg(long = "write-pct", value_delimiter = ',', default_value = "0,1", value_name = "PCT,...")]
    pub write_pct: Vec<f64>,
    /// Only these variants (e.g. parking_lot,tern-pause).
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    pub variants: Option<Vec<String>>,
    /// Nanoseconds tern's latches spin before parking (each phase, for adaptive; default:
    /// tern's default).
    #[arg(long, value_name = "NS")]
    pub spin_ns: Option<u32>,
    /// Nanoseconds of tern's first PAUSE round (default: tern's default).
    #[arg(long, value_name = "NS")]
    pub first_round_ns: Option<u16>,
    /// Nanoseconds of tern's longest PAUSE round (default: tern's default).
    #[arg(long, value_name = "NS")]
    pub max_round_ns: Option<u16>,
    /// Time one acquisition in this many (0: none).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub sample_every: u64,
}

impl LatchArgs {
    fn validate(&self) -> Result<(), String> {
        self.common.validate()?;
        if self.cs_ns.is_empty() || self.cs_ns.iter().any(|&c| c > 10_000_000) {
            return Err(format!("--cs-ns must list values in 0..=10000000, got {:?}", self.cs_ns));
        }
        if self.write_pct.iter().any(|p| !(0.0..=100.0).contains(p)) {
            return Err(format!("--write-pct must be within 0..=100, got {:?}", self.write_pct));
        }
        if self.mode.is_empty() {
            return Err("--mode must name at least one mode".into());
        }
        let config = self.spin_config(SpinConfig::DEFAULT.policy);
        config.validate().map_err(|e| e.to_string())
    }

    fn spin_config(&self, policy: SpinPolicy) -> SpinConfig {
        let d = SpinConfig::DEFAULT;
        SpinConfig {
            policy,
            spin_ns: self.spin_ns.unwrap_or(d.spin_ns),
            first_round_ns: self.first_round_ns.unwrap_or(d.first_round_ns),
            max_round_ns: self.max_round_ns.unwrap_or(d.max_round_ns),
        }
    }

    fn wanted(&self, variant: &str) -> bool {
        runner::wanted(self.variants.as_deref(), variant)
    }
}

/// What a thread needs to run one workload: calibrated work sizes and sampling.
#[derive(Clone, Copy)]
struct Load {
    cs_units: u64,
    think_units: u64,
    sample_every: u64,
    /// Shared mode: out of 10 000 operations, how many write.
    writes_per_10k: u64,
}

/// What the exclusive latches protect: a count of critical sections and the work's state.
#[derive(Default)]
struct Data {
    count: u64,
    state: u64,
}

/// An exclusive latch under test.
trait ExclusiveLatch: Sync {
    fn with<R>(&self, f: impl FnOnce(&mut Data) -> R) -> R;
}

impl ExclusiveLatch for std::sync::Mutex<Data> {
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut Data) -> R) -> R {
        f(&mut self.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl ExclusiveLatch for parking_lot::Mutex<Data> {
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut Data) -> R) -> R {
        f(&mut self.lock())
    }
}

impl ExclusiveLatch for Mutex<Data> {
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut Data) -> R) -> R {
        f(&mut self.lock())
    }
}

/// One thread of the exclusive workload: lock, count, work, unlock, think.
fn exclusive_thread(latch: &impl ExclusiveLatch, load: Load, seed: u64, ctl: &Control) -> ThreadResult {
    let mut sampler = LatencySampler::new(load.sample_every);
    let mut ops = 0u64;
    let mut outside = seed;
    while ctl.running() {
        let start = sampler.begin();
        let acquired = latch.with(|d| {
            let at = start.map(|_| Instant::now());
            d.count += 1;
            d.state = work::spin(load.cs_units, d.state);
            at
        });
        sampler.record(start, acquired);
        outside = work::spin(load.think_units, outside);
        ops += 1;
    }
    std::hint::black_box(outside);
    sampler.finish(ops)
}

/// Runs the exclusive workload on `latch` and checks that no critical section was lost. Every
/// variant's latch gets a cache-line-aligned heap slot of its own, so layout cannot favour one.
fn measure_exclusive<L: ExclusiveLatch>(
    latch: L,
    threads: usize,
    common: &Common,
    load: Load,
    count: impl Fn(L) -> u64,
) -> Option<Sample> {
    let latch = Box::new(CachePadded::new(latch));
    let sample = run_threads(threads, common.duration(), |i, ctl| exclusive_thread(&**latch, load, i as u64, ctl))?;
    let counted = count(CachePadded::into_inner(*latch));
    assert_eq!(counted, sample.ops(), "the latch lost critical sections: {counted} counted, {} done", sample.ops());
    Some(sample)
}

/// What the shared latches protect: eight words, all equal (the number of writes).
type Words = [u64; 8];

/// A reader-writer latch under test.
trait SharedLatch: Sync {
    fn read<R>(&self, f: impl FnOnce(&Words) -> R) -> R;
    fn write<R>(&self, f: impl FnOnce(&mut Words) -> R) -> R;
}

impl SharedLatch for std::sync::RwLock<Words> {
    #[inline]
    fn read<R>(&self, f: impl FnOnce(&Words) -> R) -> R {
        f(&self.read().unwrap_or_else(|p| p.into_inner()))
    }
    #[inline]
    fn write<R>(&self, f: impl FnOnce(&mut Words) -> R) -> R {
        f(&mut self.write().unwrap_or_else(|p| p.into_inner()))
    }
}

impl SharedLatch for parking_lot::RwLock<Words> {
    #[inline]
    fn read<R>(&self, f: impl FnOnce(&Words) -> R) -> R {
        f(&self.read())
    }
    #[inline]
    fn write<R>(&self, f: impl FnOnce(&mut Words) -> R) -> R {
        f(&mut self.write())
    }
}

impl SharedLatch for RwLatch<Words> {
    #[inline]
    fn read<R>(&self, f: impl FnOnce(&Words) -> R) -> R {
        f(&self.read())
    }
    #[inline]
    fn write<R>(&self, f: impl FnOnce(&mut Words) -> R) -> R {
        f(&mut self.write())
    }
}

/// One thread of the shared workload: mostly reads (sum the words, work), some writes.
fn shared_thread(latch: &impl SharedLatch, load: Load, seed: u64, ctl: &Control) -> ThreadResult {
    let mut sampler = LatencySampler::new(load.sample_every);
    let mut ops = 0u64;
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut outside = seed;
    while ctl.running() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let start = sampler.begin();
        let acquired = if rng % 10_000 < load.writes_per_10k {
            latch.write(|w| {
                let at = start.map(|_| Instant::now());
                w.iter_mut().for_each(|x| *x += 1);
                at
            })
        } else {
            latch.read(|w| {
                let at = start.map(|_| Instant::now());
                assert!(w.iter().all(|&x| x == w[0]), "a reader saw a half-done write");
                outside ^= work::spin(load.cs_units, w[0]);
                at
            })
        };
        sampler.record(start, acquired);
        outside = work::spin(load.think_units, outside);
        ops += 1;
    }
    std::hint::black_box(outside);
    sampler.finish(ops)
}

/// Runs the shared workload; the latch is placed as in [`measure_exclusive`].
fn measure_shared(latch: impl SharedLatch, threads: usize, common: &Common, load: Load) -> Option<Sample> {
    let latch = Box::new(CachePadded::new(latch));
    run_threads(threads, common.duration(), |i, ctl| shared_thread(&**latch, load, i as u64 + 1, ctl))
}

/// Adds tern's latch counters for the run, per operation (four significant digits: contention
/// in a saturated latch is often below one in a thousand), to the sample.
fn with_counters(class: LatchClass, run: impl FnOnce() -> Option<Sample>) -> Option<Sample> {
    let before = class_stats(class);
    let mut sample = run()?;
    let d: LatchStats = class_stats(class).since(&before);
    let ops = sample.ops().max(1) as f64;
    let per_op = |x: u64| json!(format!("{:.3e}", x as f64 / ops).parse::<f64>().unwrap_or(0.0));
    sample.extra.insert("contended_per_op".into(), per_op(d.contended));
    sample.extra.insert("spin_rounds_per_op".into(), per_op(d.spin_rounds));
    sample.extra.insert("parks_per_op".into(), per_op(d.parks));
    sample.extra.insert("revocations".into(), json!(d.revocations));
    Some(sample)
}

const EXCLUSIVE_BASELINE: &str = "parking_lot";
/// The default policy with acquisition counting on (`tern::sync::set_count_acquisitions`): the
/// A/B of what counting costs, run only when named.
const COUNTED_VARIANT: &str = "tern-counted";
const SHARED_BASELINE: &str = "std";

fn exclusive_variants<'a>(
    args: &'a LatchArgs,
    class: LatchClass,
    threads: usize,
    load: Load,
) -> Vec<(String, RunFn<'a>)> {
    let common = &args.common;
    let mut v: Vec<(String, RunFn<'a>)> = vec![
        (
            "std".into(),
            Box::new(move || {
                measure_exclusive(std::sync::Mutex::new(Data::default()), threads, common, load, |m| {
                    m.into_inner().unwrap_or_else(|p| p.into_inner()).count
                })
            }),
        ),
        (
            EXCLUSIVE_BASELINE.into(),
            Box::new(move || {
                measure_exclusive(parking_lot::Mutex::new(Data::default()), threads, common, load, |m| {
                    m.into_inner().count
                })
            }),
        ),
    ];
    for policy in SpinPolicy::ALL {
        let config = args.spin_config(policy);
        v.push((
            format!("tern-{}", policy.name()),
            Box::new(move || {
                class.set_config(config).expect("validated");
                with_counters(class, || {
                    measure_exclusive(Mutex::with_class(Data::default(), class), threads, common, load, |m| {
                        m.into_inner().count
                    })
                })
            }),
        ));
    }
    if runner::named(args.variants.as_deref(), COUNTED_VARIANT) {
        let config = args.spin_config(SpinConfig::DEFAULT.policy);
        v.push((
            COUNTED_VARIANT.into(),
            Box::new(move || {
                class.set_config(config).expect("validated");
                let was = tern::sync::counts_acquisitions();
                tern::sync::set_count_acquisitions(true);
                let sample = with_counters(class, || {
                    measure_exclusive(Mutex::with_class(Data::default(), class), threads, common, load, |m| {
                        m.into_inner().count
                    })
                });
                tern::sync::set_count_acquisitions(was);
                sample
            }),
        ));
    }
    v.retain(|(name, _)| args.wanted(name));
    v
}

fn shared_variants<'a>(args: &'a LatchArgs, class: LatchClass, threads: usize, load: Load) -> Vec<(String, RunFn<'a>)> {
    let common = &args.common;
    let config = args.spin_config(SpinConfig::DEFAULT.policy);
    let tern = move |bias: bool| -> RunFn<'a> {
        Box::new(move || {
            class.set_config(config).expect("validated");
            with_counters(class, || {
                measure_shared(RwLatch::with_options(Words::default(), class, bias), threads, common, load)
            })
        })
    };
    let mut v: Vec<(String, RunFn<'a>)> = vec![
        (
            SHARED_BASELINE.into(),
            Box::new(move || measure_shared(std::sync::RwLock::new(Words::default()), threads, common, load)),
        ),
        (
            "parking_lot".into(),
            Box::new(move || measure_shared(parking_lot::RwLock::new(Words::default()), threads, common, load)),
        ),
        ("tern".into(), tern(true)),
        ("tern-nobias".into(), tern(false)),
    ];
    v.retain(|(name, _)| args.wanted(name));
    v
}

/// Runs `tern bench latch`.
pub fn run(args: &LatchArgs) -> Result<(), String> {
    args.validate()?;
    let class = LatchClass::register("bench.latch").map_err(|e| e.to_string())?;
    let ns_per_unit = work::ns_per_unit();
    let think_units = work::units_for(args.think_ns, ns_per_unit);
    let mut cases = Vec::new();
    for &mode in &args.mode {
        for &cs in &args.cs_ns {
            let pcts: &[f64] = if mode == Mode::Shared { &args.write_pct } else { &[0.0] };
            for &pct in pcts {
                for threads in args.common.threads() {
                    let load = Load {
                        cs_units: work::units_for(cs, ns_per_unit),
                        think_units,
                        sample_every: args.sample_every,
                        writes_per_10k: (pct * 100.0).round() as u64,
                    };
                    let mut params = vec![("mode", json!(mode_name(mode))), ("cs_ns", json!(cs))];
                    let (variants, baseline) = match mode {
                        Mode::Exclusive => (exclusive_variants(args, class, threads, load), EXCLUSIVE_BASELINE),
                        Mode::Shared => {
                            params.push(("write_pct", json!(pct)));
                            (shared_variants(args, class, threads, load), SHARED_BASELINE)
                        }
                    };
                    if !variants.is_empty() {
                        cases.push(Case { params, threads, variants, baseline: Some(baseline.into()) });
                    }
                }
            }
        }
    }
    if cases.is_empty() {
        return Err("no variant matches --variants".into());
    }
    let records = runner::run("latch", &cases, args.common.rounds);
    // Restore the default so later benchmarks in this process start clean.
    class.set_config(SpinConfig::DEFAULT).map_err(|e| e.to_string())?;
    let title = format!(
        "latch: {} s per point, {} round(s), think {} ns; busy-work unit {:.2} ns; {} CPUs",
        args.common.duration,
        args.common.rounds,
        args.think_ns,
        ns_per_unit,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let c = tern::sync::calibration();
    let config = args.spin_config(SpinConfig::DEFAULT.policy);
    // The fastest of 5, as the calibration: a preempted run says nothing about PAUSE.
    let budget_took = (0..5).map(|_| c.time_round(u64::from(config.spin_ns))).fold(f64::INFINITY, f64::min);
    let title = format!(
        "{title}\ncalibration: {} ({} CPUs); PAUSE {:.1} ns, park/unpark round trip {:.1} us; spin budget {:.1} us \
         = {} PAUSEs here (took {:.1} us), first round {} ns = {} PAUSEs",
        c.cpu_model,
        c.cpus,
        c.pause_ns,
        c.park_round_trip_ns / 1000.0,
        f64::from(config.spin_ns) / 1000.0,
        c.pauses_in(u64::from(config.spin_ns)),
        budget_took / 1000.0,
        config.first_round_ns,
        c.pauses_in(u64::from(config.first_round_ns)),
    );
    emit(&records, args.common.json, &title, &key_ratios(&records));
    Ok(())
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Shared => "shared",
    }
}

/// The ratios the latch design is judged by, read off the records that were measured.
fn key_ratios(records: &[Record]) -> Vec<String> {
    let find = |mode: &str, variant: &str, threads: usize, pct: Option<f64>| {
        let min_cs = records
            .iter()
            .filter(|r| r.params.get("mode") == Some(&json!(mode)))
            .filter_map(|r| r.params.get("cs_ns").and_then(Value::as_u64))
            .min()?;
        records.iter().find(|r| {
            r.params.get("mode") == Some(&json!(mode))
                && r.params.get("cs_ns") == Some(&json!(min_cs))
                && pct.is_none_or(|p| r.params.get("write_pct") == Some(&json!(p)))
                && r.variant == variant
                && r.threads == threads
        })
    };
    let mut notes = Vec::new();
    let mut line = |label: String, value: Option<f64>| {
        if let Some(v) = value {
            notes.push(format!("  {label:<58} {v:.2}x"));
        }
    };
    let default = format!("tern-{}", SpinConfig::DEFAULT.policy.name());
    line(
        format!("{default} (default) / parking_lot, 1 thread (uncontended)"),
        find("exclusive", &default, 1, None).and_then(|r| r.vs_baseline),
    );
    for t in [8, 16] {
        line(
            format!("{default} (default) / parking_lot, {t} threads"),
            find("exclusive", &default, t, None).and_then(|r| r.vs_baseline),
        );
        let best_fixed = SpinPolicy::ALL
            .into_iter()
            .filter(|&p| p != SpinConfig::DEFAULT.policy)
            .filter_map(|p| find("exclusive", &format!("tern-{}", p.name()), t, None))
            .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        let ratio = find("exclusive", &default, t, None).zip(best_fixed).map(|(d, b)| {
            (
                format!("{default} / {} (best other tern policy), {t} threads (medians)", b.variant),
                d.ops_per_sec / b.ops_per_sec,
            )
        });
        if let Some((label, r)) = ratio {
            line(label, Some(r));
        }
    }
    line(
        "RwLatch read-only, 2 threads / 1 thread".into(),
        find("shared", "tern", 2, Some(0.0)).and_then(|r| r.vs_1_thread),
    );
    line(
        "RwLatch / std::sync::RwLock, read-only, 2 threads".into(),
        find("shared", "tern", 2, Some(0.0)).and_then(|r| r.vs_baseline),
    );
    if !notes.is_empty() {
        notes.insert(0, "\nkey ratios (smallest critical section measured):".into());
    }
    notes
}
