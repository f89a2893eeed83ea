//! Hardware performance counters per benchmark operation, through Linux `perf_event_open(2)`.
//!
//! What is measured: CPU cycles, retired instructions, L1 data-cache read misses, last-level
//! cache misses (`PERF_COUNT_HW_CACHE_MISSES`), branch misses and back-end stall cycles, counted
//! in user space only. [`CounterValues::per_op`] turns the totals into figures per operation
//! (IPC, misses per operation, L1D MPKI, back-end stall share) for the report.
//!
//! How: every benchmark thread opens its own counters with [`ThreadCounters::start`] (pid 0 and
//! cpu -1: the calling thread, on whichever CPU it runs), does its work, and hands the counts of
//! [`ThreadCounters::stop`] to the driver, which adds the threads up with [`CounterValues::merge`].
//! [`availability`] probes once per process whether any counter opens at all, for the report
//! line "hardware counters: unavailable (reason)".
//!
//! Invariants and limits:
//! - Each event is opened on its own (no event group) and read on its own. When more events are
//!   open than the PMU has counters, the kernel multiplexes them; each count is then scaled by
//!   `time_enabled / time_running` (`PERF_FORMAT_TOTAL_TIME_ENABLED | _RUNNING`), which is an
//!   estimate that assumes the workload is uniform over the measured interval. An event that was
//!   enabled but never got a hardware counter reads as `None`, never as a made-up number.
//! - `exclude_kernel` and `exclude_hv` are set, so that `kernel.perf_event_paranoid = 2` (the
//!   usual default) allows the events without privileges. Work done in system calls, page faults
//!   and interrupts is therefore not counted: the figures describe user-space code only.
//! - `inherit` is off: threads spawned by a measured thread are not counted; each benchmark
//!   thread must open its own counters. A [`ThreadCounters`] is not `Send`, so it cannot be moved
//!   to (and mistaken for counting) another thread.
//! - An event the kernel refuses is simply `None` (for example back-end stalls on most Intel
//!   CPUs); [`ThreadCounters::start`] fails only when none of the six events opens.
//! - In a virtual machine without a virtual PMU (or in a container whose seccomp filter blocks
//!   `perf_event_open`) no hardware event opens: `start` and [`availability`] return `Err` with a
//!   short reason naming the errno, such as "perf_event_open: hardware events not supported
//!   (ENOENT)", and the benchmarks run without counters.
//! - On targets other than Linux the module compiles to a stub whose `start` always fails.
//! - Nothing here panics; failures of the system calls become `Err` or `None`.

use serde_json::{json, Map, Value};
use std::marker::PhantomData;
use std::sync::OnceLock;

/// Number of events opened per thread.
const EVENT_COUNT: usize = 6;

/// Names of the events, in the order used throughout this module (the order of the fields of
/// [`CounterValues`]); [`availability`] reports these names. Unused by the stub for other targets.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const EVENT_NAMES: [&str; EVENT_COUNT] =
    ["cycles", "instructions", "l1d_misses", "llc_misses", "branch_misses", "backend_stall_cycles"];

/// One thread's open counters. Not `Send`: the counters count the thread that opened them, so
/// the value stays on that thread (a `PhantomData<*const ()>` marker enforces it).
pub struct ThreadCounters {
    /// The open events (or the stub on targets other than Linux).
    inner: imp::Counters,
    /// Makes the type neither `Send` nor `Sync`.
    _not_send: PhantomData<*const ()>,
}

impl ThreadCounters {
    /// Opens the counters for the calling thread (pid 0, cpu -1, `exclude_kernel` and
    /// `exclude_hv` set so that `kernel.perf_event_paranoid = 2` allows it), resets them and
    /// starts counting.
    ///
    /// Events the kernel refuses are left out (they read as `None`). Returns `Err(reason)` only
    /// when none of the six hardware events opens; the reason is short, human readable and names
    /// the errno, e.g. "perf_event_open: hardware events not supported (ENOENT)" or
    /// "perf_event_open: not permitted: kernel.perf_event_paranoid=3 (EACCES)".
    pub fn start() -> Result<ThreadCounters, String> {
        imp::start().map(|inner| ThreadCounters { inner, _not_send: PhantomData })
    }

    /// Stops counting and returns what was counted since [`start`](Self::start), each event
    /// read separately and scaled by `time_enabled / time_running` when the kernel multiplexed
    /// it. An event that was not opened, could not be read, or never got a hardware counter is
    /// `None`. Closes the file descriptors.
    pub fn stop(self) -> CounterValues {
        imp::stop(self.inner)
    }

    /// Names of the events that opened, in [`EVENT_NAMES`] order.
    fn opened(&self) -> Vec<&'static str> {
        imp::opened(&self.inner)
    }
}

/// Counts of one thread, or totals over threads; `None` where the event could not be opened or
/// measured (on one of the threads, for totals).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CounterValues {
    /// CPU cycles in user space (`PERF_COUNT_HW_CPU_CYCLES`).
    pub cycles: Option<u64>,
    /// Retired instructions in user space (`PERF_COUNT_HW_INSTRUCTIONS`).
    pub instructions: Option<u64>,
    /// L1 data-cache read misses (`PERF_TYPE_HW_CACHE`: L1D, `OP_READ`, `RESULT_MISS`).
    pub l1d_misses: Option<u64>,
    /// Last-level cache misses (`PERF_COUNT_HW_CACHE_MISSES`).
    pub llc_misses: Option<u64>,
    /// Mispredicted branches (`PERF_COUNT_HW_BRANCH_MISSES`).
    pub branch_misses: Option<u64>,
    /// Cycles the back end stalled (`PERF_COUNT_HW_STALLED_CYCLES_BACKEND`); often unsupported
    /// on Intel CPUs.
    pub backend_stall_cycles: Option<u64>,
}

impl CounterValues {
    /// Builds values from an array in [`EVENT_NAMES`] order.
    fn from_array(values: [Option<u64>; EVENT_COUNT]) -> CounterValues {
        let [cycles, instructions, l1d_misses, llc_misses, branch_misses, backend_stall_cycles] = values;
        CounterValues { cycles, instructions, l1d_misses, llc_misses, branch_misses, backend_stall_cycles }
    }

    /// The fields in [`EVENT_NAMES`] order.
    fn to_array(self) -> [Option<u64>; EVENT_COUNT] {
        [
            self.cycles,
            self.instructions,
            self.l1d_misses,
            self.llc_misses,
            self.branch_misses,
            self.backend_stall_cycles,
        ]
    }

    /// Adds another thread's counts to these.
    ///
    /// An empty value (all `None`, as from [`Default`]) means "nothing yet": merging into it
    /// takes `other` as it is, so totals are built by folding every thread's values into
    /// `CounterValues::default()`. Otherwise each field is summed (saturating) where it is
    /// `Some` on both sides and becomes `None` where it is missing on either side, because a
    /// figure missing on one thread would make the total wrong. In particular, merging an empty
    /// `other` into a non-empty value clears every field.
    ///
    /// Limit: the "nothing yet" reading of an empty value cannot tell it apart from a total that
    /// became all `None`; that needs threads whose present fields do not overlap at all (or a
    /// thread whose events never got a hardware counter), which does not happen when every
    /// thread opens the same events on one machine.
    pub fn merge(&mut self, other: &CounterValues) {
        if self.is_empty() {
            *self = *other;
            return;
        }
        let mut sum = self.to_array();
        for (mine, theirs) in sum.iter_mut().zip(other.to_array()) {
            *mine = match (*mine, theirs) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                _ => None,
            };
        }
        *self = CounterValues::from_array(sum);
    }

    /// True when no field is `Some`.
    pub fn is_empty(&self) -> bool {
        self.to_array().iter().all(Option::is_none)
    }

    /// Figures per operation for a report, only for fields that are present: "ipc"
    /// (instructions / cycles), "cycles_per_op", "instructions_per_op", "l1d_misses_per_op",
    /// "llc_misses_per_op", "branch_misses_per_op", "l1d_mpki" (L1D misses per 1000
    /// instructions) and "backend_stall_pct" (100 * stall cycles / cycles). Ratios whose
    /// denominator is zero are left out. Values are rounded to 3 decimals. Empty when
    /// `ops == 0`.
    pub fn per_op(&self, ops: u64) -> Map<String, Value> {
        let mut map = Map::new();
        if ops == 0 {
            return map;
        }
        let mut put = |key: &str, numerator: Option<u64>, denominator: Option<u64>, factor: f64| {
            if let (Some(n), Some(d)) = (numerator, denominator) {
                if d > 0 {
                    map.insert(key.to_owned(), round3(factor * n as f64 / d as f64));
                }
            }
        };
        put("ipc", self.instructions, self.cycles, 1.0);
        put("cycles_per_op", self.cycles, Some(ops), 1.0);
        put("instructions_per_op", self.instructions, Some(ops), 1.0);
        put("l1d_misses_per_op", self.l1d_misses, Some(ops), 1.0);
        put("llc_misses_per_op", self.llc_misses, Some(ops), 1.0);
        put("branch_misses_per_op", self.branch_misses, Some(ops), 1.0);
        put("l1d_mpki", self.l1d_misses, self.instructions, 1000.0);
        put("backend_stall_pct", self.backend_stall_cycles, self.cycles, 100.0);
        map
    }
}

/// `x` rounded to 3 decimals, as a JSON number.
fn round3(x: f64) -> Value {
    json!((x * 1000.0).round() / 1000.0)
}

/// Probes once per process (cached in a [`OnceLock`]) whether the hardware counters can be
/// opened on this machine, by opening and closing them on the calling thread: `Ok` with the
/// names of the events that opened (e.g. `["cycles", "instructions", ...]`) or `Err(reason)`
/// with the same reason [`ThreadCounters::start`] gives, for the report line
/// "hardware counters: unavailable (reason)".
pub fn availability() -> &'static Result<Vec<&'static str>, String> {
    static PROBE: OnceLock<Result<Vec<&'static str>, String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        ThreadCounters::start().map(|counters| {
            let names = counters.opened();
            counters.stop();
            names
        })
    })
}

/// The Linux implementation: one `perf_event_open` file descriptor per event.
#[cfg(target_os = "linux")]
mod imp {
    use super::{CounterValues, EVENT_COUNT, EVENT_NAMES};
    use std::io;
    use std::mem::size_of;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    /// `PERF_TYPE_HARDWARE`.
    const TYPE_HARDWARE: u32 = 0;
    /// `PERF_TYPE_HW_CACHE`.
    const TYPE_HW_CACHE: u32 = 3;

    /// `PERF_COUNT_HW_CPU_CYCLES`.
    const HW_CPU_CYCLES: u64 = 0;
    /// `PERF_COUNT_HW_INSTRUCTIONS`.
    const HW_INSTRUCTIONS: u64 = 1;
    /// `PERF_COUNT_HW_CACHE_MISSES`.
    const HW_CACHE_MISSES: u64 = 3;
    /// `PERF_COUNT_HW_BRANCH_MISSES`.
    const HW_BRANCH_MISSES: u64 = 5;
    /// `PERF_COUNT_HW_STALLED_CYCLES_BACKEND`.
    const HW_STALLED_CYCLES_BACKEND: u64 = 8;
    /// `PERF_COUNT_HW_CACHE_L1D`.
    const CACHE_L1D: u64 = 0;
    /// `PERF_COUNT_HW_CACHE_OP_READ`.
    const CACHE_OP_READ: u64 = 0;
    /// `PERF_COUNT_HW_CACHE_RESULT_MISS`.
    const CACHE_RESULT_MISS: u64 = 1;
    /// The `PERF_TYPE_HW_CACHE` config for L1D read misses: cache id, operation << 8, result << 16.
    const HW_CACHE_L1D_READ_MISS: u64 = CACHE_L1D | (CACHE_OP_READ << 8) | (CACHE_RESULT_MISS << 16);

    /// `PERF_FORMAT_TOTAL_TIME_ENABLED`.
    const FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
    /// `PERF_FORMAT_TOTAL_TIME_RUNNING`.
    const FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;

    /// `PERF_FLAG_FD_CLOEXEC`.
    const FLAG_FD_CLOEXEC: libc::c_long = 1 << 3;

    /// Ioctl numbers (`_IO('$', n)`): enable, disable, reset.
    pub(super) const IOC_ENABLE: u32 = 0;
    /// See [`IOC_ENABLE`].
    pub(super) const IOC_DISABLE: u32 = 1;
    /// See [`IOC_ENABLE`].
    pub(super) const IOC_RESET: u32 = 3;

    /// `(type, config)` of each event, in [`EVENT_NAMES`] order.
    const EVENTS: [(u32, u64); EVENT_COUNT] = [
        (TYPE_HARDWARE, HW_CPU_CYCLES),
        (TYPE_HARDWARE, HW_INSTRUCTIONS),
        (TYPE_HW_CACHE, HW_CACHE_L1D_READ_MISS),
        (TYPE_HARDWARE, HW_CACHE_MISSES),
        (TYPE_HARDWARE, HW_BRANCH_MISSES),
        (TYPE_HARDWARE, HW_STALLED_CYCLES_BACKEND),
    ];

    /// The mask of the bit-field flag declared `bit`-th in `struct perf_event_attr`. C compilers
    /// allocate bit-fields from the least significant bit on little-endian targets and from the
    /// most significant bit on big-endian ones.
    pub(super) const fn attr_flag(bit: u32) -> u64 {
        if cfg!(target_endian = "little") {
            1 << bit
        } else {
            1 << (63 - bit)
        }
    }

    /// Bit-field `disabled`: the event is created stopped.
    const ATTR_DISABLED: u64 = attr_flag(0);
    /// Bit-field `exclude_kernel`: do not count in the kernel.
    const ATTR_EXCLUDE_KERNEL: u64 = attr_flag(5);
    /// Bit-field `exclude_hv`: do not count in the hypervisor.
    const ATTR_EXCLUDE_HV: u64 = attr_flag(6);

    /// `struct perf_event_attr` as of `PERF_ATTR_SIZE_VER8` (136 bytes). Kernels that know a
    /// smaller version accept it as long as the bytes they do not know are zero, which they are
    /// here. Unions are represented by the member this module uses (or the first one).
    #[repr(C)]
    #[derive(Default)]
    pub(super) struct PerfEventAttr {
        /// Major type: hardware, cache, ...
        pub(super) type_: u32,
        /// Size of this struct, for versioning.
        pub(super) size: u32,
        /// Event within the type.
        pub(super) config: u64,
        /// Union `sample_period` / `sample_freq`; unused (0: counting only).
        pub(super) sample_period: u64,
        /// Unused (no sampling).
        pub(super) sample_type: u64,
        /// What `read` returns.
        pub(super) read_format: u64,
        /// The bit-fields `disabled`, `inherit`, ..., see [`attr_flag`].
        pub(super) flags: u64,
        /// Union `wakeup_events` / `wakeup_watermark`; unused.
        pub(super) wakeup_events: u32,
        /// Unused (no breakpoints).
        pub(super) bp_type: u32,
        /// Union `bp_addr` / `config1` / ...; unused.
        pub(super) config1: u64,
        /// Union `bp_len` / `config2` / ...; unused.
        pub(super) config2: u64,
        /// Unused.
        pub(super) branch_sample_type: u64,
        /// Unused.
        pub(super) sample_regs_user: u64,
        /// Unused.
        pub(super) sample_stack_user: u32,
        /// Unused.
        pub(super) clockid: i32,
        /// Unused.
        pub(super) sample_regs_intr: u64,
        /// Unused.
        pub(super) aux_watermark: u32,
        /// Unused.
        pub(super) sample_max_stack: u16,
        /// Reserved, must be zero.
        pub(super) reserved_2: u16,
        /// Unused.
        pub(super) aux_sample_size: u32,
        /// Reserved (`aux_action` in newer kernels), must be zero.
        pub(super) reserved_3: u32,
        /// Unused.
        pub(super) sig_data: u64,
        /// Unused.
        pub(super) config3: u64,
    }

    /// `PERF_ATTR_SIZE_VER8`.
    pub(super) const ATTR_SIZE: usize = 136;
    const _: () = assert!(size_of::<PerfEventAttr>() == ATTR_SIZE);

    /// The open events of one thread; `None` where the event did not open.
    pub(crate) struct Counters {
        /// One descriptor per event, in [`EVENT_NAMES`] order.
        fds: [Option<OwnedFd>; EVENT_COUNT],
    }

    /// Opens, resets and enables every event for the calling thread.
    pub(super) fn start() -> Result<Counters, String> {
        let mut first_error = None;
        let fds = EVENTS.map(|(type_, config)| match open_event(type_, config) {
            Ok(fd) => Some(fd),
            Err(err) => {
                first_error.get_or_insert(err);
                None
            }
        });
        // Enable only after every event is open, so that they count over the same interval.
        let fds = fds.map(|fd| {
            let fd = fd?;
            match ioctl(&fd, IOC_RESET).and_then(|()| ioctl(&fd, IOC_ENABLE)) {
                Ok(()) => Some(fd),
                Err(err) => {
                    first_error.get_or_insert(err);
                    None
                }
            }
        });
        if fds.iter().any(Option::is_some) {
            Ok(Counters { fds })
        } else {
            Err(first_error.map_or_else(|| "perf_event_open: no event opened".to_owned(), |err| reason(&err)))
        }
    }

    /// Disables every event, then reads and closes each.
    pub(super) fn stop(counters: Counters) -> CounterValues {
        let fds = counters.fds;
        for fd in fds.iter().flatten() {
            // A failure leaves the event counting a little longer; the read below still works.
            let _ = ioctl(fd, IOC_DISABLE);
        }
        CounterValues::from_array(fds.map(|fd| fd.and_then(|fd| read_scaled(&fd))))
    }

    /// Names of the events that opened.
    pub(super) fn opened(counters: &Counters) -> Vec<&'static str> {
        counters.fds.iter().zip(EVENT_NAMES).filter(|(fd, _)| fd.is_some()).map(|(_, name)| name).collect()
    }

    /// Opens one disabled, user-space-only counting event for the calling thread.
    pub(super) fn open_event(type_: u32, config: u64) -> io::Result<OwnedFd> {
        let mut attr = PerfEventAttr {
            type_,
            size: ATTR_SIZE as u32,
            config,
            read_format: FORMAT_TOTAL_TIME_ENABLED | FORMAT_TOTAL_TIME_RUNNING,
            flags: ATTR_DISABLED | ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV,
            ..PerfEventAttr::default()
        };
        let attr_ptr: *mut PerfEventAttr = &mut attr;
        let (pid, cpu, group_fd): (libc::c_long, libc::c_long, libc::c_long) = (0, -1, -1);
        // SAFETY: `attr_ptr` points to a live, fully initialised `perf_event_attr` whose `size`
        // field is its real size, so the kernel reads (and on E2BIG writes back `size`) only
        // within it; the other arguments are plain integers passed as `long`, as the syscall ABI
        // expects.
        let ret = unsafe { libc::syscall(libc::SYS_perf_event_open, attr_ptr, pid, cpu, group_fd, FLAG_FD_CLOEXEC) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let raw = libc::c_int::try_from(ret).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        // SAFETY: `raw` is a descriptor the kernel has just opened for this call; nothing else
        // owns it, so the `OwnedFd` becomes its sole owner and closes it once.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    }

    /// Runs the argument-less perf ioctl `_IO('$', nr)` on `fd`.
    pub(super) fn ioctl(fd: &OwnedFd, nr: u32) -> io::Result<()> {
        let request = libc::_IO(u32::from(b'$'), nr);
        // SAFETY: `fd` is an open perf event descriptor borrowed for the call; the enable,
        // disable and reset requests take an integer flag argument (0: this event only) and
        // touch no user memory.
        let ret = unsafe { libc::ioctl(fd.as_raw_fd(), request, 0 as libc::c_ulong) };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Reads `{ value, time_enabled, time_running }` from `fd` and scales the value.
    pub(super) fn read_scaled(fd: &OwnedFd) -> Option<u64> {
        let mut buf = [0u64; 3];
        let len = size_of::<[u64; 3]>();
        // SAFETY: `buf` is a live, writable local buffer of exactly `len` bytes, and `fd` is an
        // open descriptor borrowed for the call; `read` writes at most `len` bytes into it.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), len) };
        if usize::try_from(n).ok() != Some(len) {
            return None;
        }
        let [value, enabled, running] = buf;
        scale(value, enabled, running)
    }

    /// The count an event would have reached had it run the whole time it was enabled:
    /// `value * enabled / running`. `None` if it was enabled but never ran (nothing is known);
    /// exact when it ran throughout (or no time passed at all).
    pub(super) fn scale(value: u64, enabled: u64, running: u64) -> Option<u64> {
        if running == 0 {
            return (enabled == 0).then_some(value);
        }
        if running >= enabled {
            return Some(value);
        }
        let scaled = u128::from(value) * u128::from(enabled) / u128::from(running);
        Some(u64::try_from(scaled).unwrap_or(u64::MAX))
    }

    /// A short, human readable reason why an event did not open, naming the errno.
    pub(super) fn reason(err: &io::Error) -> String {
        let Some(code) = err.raw_os_error() else {
            return format!("perf_event_open: {err}");
        };
        let name = errno_name(code);
        match code {
            libc::ENOENT | libc::ENODEV | libc::EOPNOTSUPP => {
                format!("perf_event_open: hardware events not supported ({name})")
            }
            libc::EACCES | libc::EPERM => match paranoid() {
                Some(level) if level > 2 => {
                    format!("perf_event_open: not permitted: kernel.perf_event_paranoid={level} ({name})")
                }
                Some(level) => format!(
                    "perf_event_open: not permitted ({name}; kernel.perf_event_paranoid={level}, \
                     so a seccomp filter or security module denies it)"
                ),
                None => format!("perf_event_open: not permitted ({name})"),
            },
            libc::ENOSYS => format!("perf_event_open: system call not available ({name})"),
            libc::EMFILE | libc::ENFILE => format!("perf_event_open: too many open files ({name})"),
            libc::EINVAL | libc::E2BIG => format!("perf_event_open: event attributes rejected ({name})"),
            _ => format!("perf_event_open failed ({name})"),
        }
    }

    /// `kernel.perf_event_paranoid`, if readable.
    fn paranoid() -> Option<i32> {
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok()?.trim().parse().ok()
    }

    /// The symbolic name of the errno values `perf_event_open` and `ioctl` return.
    pub(super) fn errno_name(code: i32) -> String {
        let name = match code {
            libc::E2BIG => "E2BIG",
            libc::EACCES => "EACCES",
            libc::EBADF => "EBADF",
            libc::EBUSY => "EBUSY",
            libc::EFAULT => "EFAULT",
            libc::EINTR => "EINTR",
            libc::EINVAL => "EINVAL",
            libc::EMFILE => "EMFILE",
            libc::ENFILE => "ENFILE",
            libc::ENODEV => "ENODEV",
            libc::ENOENT => "ENOENT",
            libc::ENOMEM => "ENOMEM",
            libc::ENOSPC => "ENOSPC",
            libc::ENOSYS => "ENOSYS",
            libc::ENOTTY => "ENOTTY",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            libc::EOVERFLOW => "EOVERFLOW",
            libc::EPERM => "EPERM",
            libc::ESRCH => "ESRCH",
            _ => return format!("errno {code}"),
        };
        name.to_owned()
    }
}

/// The stub for targets other than Linux: no counter ever opens.
#[cfg(not(target_os = "linux"))]
mod imp {
    use super::CounterValues;

    /// Never constructed.
    pub(crate) struct Counters(());

    /// Always fails: there is no `perf_event_open`.
    pub(super) fn start() -> Result<Counters, String> {
        Err("hardware counters need Linux perf_event_open".to_owned())
    }

    /// Nothing was counted.
    pub(super) fn stop(_counters: Counters) -> CounterValues {
        CounterValues::default()
    }

    /// Nothing opened.
    pub(super) fn opened(_counters: &Counters) -> Vec<&'static str> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Values with every field present.
    fn full() -> CounterValues {
        CounterValues {
            cycles: Some(2000),
            instructions: Some(3000),
            l1d_misses: Some(30),
            llc_misses: Some(5),
            branch_misses: Some(7),
            backend_stall_cycles: Some(500),
        }
    }

    #[test]
    fn merge_sums_fields_present_on_both_sides() {
        let mut total = full();
        total.merge(&full());
        assert_eq!(
            total,
            CounterValues {
                cycles: Some(4000),
                instructions: Some(6000),
                l1d_misses: Some(60),
                llc_misses: Some(10),
                branch_misses: Some(14),
                backend_stall_cycles: Some(1000),
            }
        );
    }

    #[test]
    fn merge_drops_fields_missing_on_either_side() {
        let partial = CounterValues { backend_stall_cycles: None, l1d_misses: None, ..full() };
        let mut total = full();
        total.merge(&partial);
        assert_eq!(total.backend_stall_cycles, None);
        assert_eq!(total.l1d_misses, None);
        assert_eq!(total.cycles, Some(4000));

        let mut total = partial;
        total.merge(&full());
        assert_eq!(total.backend_stall_cycles, None);
        assert_eq!(total.l1d_misses, None);
        assert_eq!(total.instructions, Some(6000));
    }

    #[test]
    fn merge_into_default_takes_the_other_values() {
        let partial = CounterValues { cycles: Some(1), instructions: Some(2), ..CounterValues::default() };
        let mut total = CounterValues::default();
        total.merge(&partial);
        assert_eq!(total, partial);
        total.merge(&partial);
        assert_eq!(total, CounterValues { cycles: Some(2), instructions: Some(4), ..CounterValues::default() });
    }

    #[test]
    fn merging_an_empty_value_into_a_total_clears_it() {
        let mut total = full();
        total.merge(&CounterValues::default());
        assert!(total.is_empty());
    }

    #[test]
    fn merge_saturates() {
        let mut total = CounterValues { cycles: Some(u64::MAX - 1), ..CounterValues::default() };
        total.merge(&CounterValues { cycles: Some(5), ..CounterValues::default() });
        assert_eq!(total.cycles, Some(u64::MAX));
    }

    #[test]
    fn is_empty_only_without_any_field() {
        assert!(CounterValues::default().is_empty());
        assert!(!full().is_empty());
        assert!(!CounterValues { backend_stall_cycles: Some(0), ..CounterValues::default() }.is_empty());
    }

    #[test]
    fn per_op_computes_every_figure() {
        let figures = full().per_op(1000);
        let expected = json!({
            "ipc": 1.5,
            "cycles_per_op": 2.0,
            "instructions_per_op": 3.0,
            "l1d_misses_per_op": 0.03,
            "llc_misses_per_op": 0.005,
            "branch_misses_per_op": 0.007,
            "l1d_mpki": 10.0,
            "backend_stall_pct": 25.0,
        });
        assert_eq!(Value::Object(figures), expected);
    }

    #[test]
    fn per_op_rounds_to_three_decimals() {
        let values = CounterValues { cycles: Some(3), instructions: Some(2), ..CounterValues::default() };
        let figures = values.per_op(3);
        assert_eq!(figures["ipc"], json!(0.667));
        assert_eq!(figures["cycles_per_op"], json!(1.0));
        assert_eq!(figures["instructions_per_op"], json!(0.667));
    }

    #[test]
    fn per_op_omits_missing_fields_and_zero_denominators() {
        let values = CounterValues {
            cycles: Some(0),
            instructions: Some(0),
            l1d_misses: Some(4),
            backend_stall_cycles: Some(1),
            ..CounterValues::default()
        };
        let figures = values.per_op(2);
        let mut keys: Vec<&str> = figures.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["cycles_per_op", "instructions_per_op", "l1d_misses_per_op"]);
        assert_eq!(figures["l1d_misses_per_op"], json!(2.0));

        let only_instructions = CounterValues { instructions: Some(10), ..CounterValues::default() };
        let figures = only_instructions.per_op(4);
        assert_eq!(figures.len(), 1);
        assert_eq!(figures["instructions_per_op"], json!(2.5));
    }

    #[test]
    fn per_op_is_empty_without_operations() {
        assert!(full().per_op(0).is_empty());
        assert!(CounterValues::default().per_op(10).is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn scaling_extrapolates_multiplexed_counts() {
        assert_eq!(imp::scale(100, 50, 50), Some(100));
        assert_eq!(imp::scale(100, 100, 25), Some(400));
        assert_eq!(imp::scale(0, 0, 0), Some(0));
        assert_eq!(imp::scale(0, 10, 0), None);
        assert_eq!(imp::scale(u64::MAX, 10, 1), Some(u64::MAX));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn attr_layout_matches_the_kernel() {
        use std::mem::offset_of;
        type Attr = imp::PerfEventAttr;
        assert_eq!(std::mem::size_of::<Attr>(), imp::ATTR_SIZE);
        assert_eq!(offset_of!(Attr, config), 8);
        assert_eq!(offset_of!(Attr, read_format), 32);
        assert_eq!(offset_of!(Attr, flags), 40);
        assert_eq!(offset_of!(Attr, config1), 56); // PERF_ATTR_SIZE_VER0 = 64
        assert_eq!(offset_of!(Attr, branch_sample_type), 72); // VER2 = 80
        assert_eq!(offset_of!(Attr, clockid), 92); // VER3 = 96
        assert_eq!(offset_of!(Attr, sample_regs_intr), 96); // VER4 = 104
        assert_eq!(offset_of!(Attr, reserved_2), 110); // VER5 = 112
        assert_eq!(offset_of!(Attr, reserved_3), 116); // VER6 = 120
        assert_eq!(offset_of!(Attr, sig_data), 120); // VER7 = 128
        assert_eq!(offset_of!(Attr, config3), 128); // VER8 = 136
        if cfg!(target_endian = "little") {
            assert_eq!(imp::attr_flag(0) | imp::attr_flag(5) | imp::attr_flag(6), 0x61);
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reasons_name_the_errno() {
        let reason = imp::reason(&std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(reason, "perf_event_open: hardware events not supported (ENOENT)");
        let reason = imp::reason(&std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(reason.starts_with("perf_event_open: not permitted"), "{reason}");
        assert!(reason.contains("EACCES"), "{reason}");
        assert_eq!(imp::errno_name(libc::EOPNOTSUPP), "EOPNOTSUPP");
        assert_eq!(imp::errno_name(12345), "errno 12345");
    }

    /// The open / reset / enable / disable / read path against the real kernel, with a software
    /// event (task clock, in nanoseconds), which opens even where no hardware PMU exists.
    #[cfg(target_os = "linux")]
    #[test]
    fn software_event_goes_through_the_same_path() {
        const TYPE_SOFTWARE: u32 = 1;
        const SW_TASK_CLOCK: u64 = 1;
        let fd = match imp::open_event(TYPE_SOFTWARE, SW_TASK_CLOCK) {
            Ok(fd) => fd,
            // Denied altogether (seccomp, paranoid 3): nothing to check here.
            Err(err) => return eprintln!("software event not available: {}", imp::reason(&err)),
        };
        imp::ioctl(&fd, imp::IOC_RESET).expect("reset");
        imp::ioctl(&fd, imp::IOC_ENABLE).expect("enable");
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        std::hint::black_box(x);
        imp::ioctl(&fd, imp::IOC_DISABLE).expect("disable");
        let first = imp::read_scaled(&fd).expect("read");
        assert!(first > 0, "task clock counted {first} ns");
        // Disabled: the count no longer moves.
        std::hint::black_box((0..100_000u64).sum::<u64>());
        assert_eq!(imp::read_scaled(&fd), Some(first));
    }

    #[test]
    fn counters_count_work_or_explain_why_not() {
        // Long enough (tens of milliseconds) for multiplexed events to get a turn on the PMU.
        const ITERATIONS: u64 = 10_000_000;
        match availability() {
            Ok(names) => {
                assert!(!names.is_empty());
                let counters = ThreadCounters::start().expect("availability() said the counters open");
                let mut x = 0u64;
                for i in 0..ITERATIONS {
                    x = std::hint::black_box(x.wrapping_add(i));
                }
                std::hint::black_box(x);
                let values = counters.stop();
                assert!(!values.is_empty());
                if names.contains(&"instructions") {
                    let instructions = values.instructions.expect("instructions opened, so they were counted");
                    assert!(instructions > ITERATIONS, "{instructions} instructions for {ITERATIONS} iterations");
                }
            }
            Err(reason) => {
                assert!(!reason.is_empty());
                let err = ThreadCounters::start().err().expect("availability() said the counters do not open");
                assert!(!err.is_empty());
                eprintln!("hardware counters: unavailable ({err})");
            }
        }
    }
}
