//! Memory cgroups for `--memory-limit`: one per engine's worker process, made under the cgroup
//! this process is in (on a machine where it runs in the root cgroup: `/sys/fs/cgroup/unified/
//! <name>` with cgroup v2, `/sys/fs/cgroup/memory/<name>` with v1), removed when dropped.
//!
//! cgroup v2 is used if its memory controller is usable there (listed in `cgroup.controllers`,
//! and enabled, or enableable, in the parent's `cgroup.subtree_control`); else cgroup v1's
//! memory hierarchy. The limit (`memory.max`, v2; `memory.limit_in_bytes`, v1) counts
//! everything the kernel charges to the group: the process's memory, the page cache of the
//! files it reads and writes, kernel memory. Swap is capped too where the kernel offers it
//! (`memory.swap.max` = 0; `memory.memsw.limit_in_bytes` = the limit), so the limit is on memory,
//! not memory plus swap.
//!
//! A group is named `tern-bench-<pid>-<engine>` ([`group_name`]). A run killed outright (no
//! chance to remove its groups) leaves them behind, empty once its workers exit (they watch
//! their parent, `worker.rs`): each new run removes, before it makes its own, the groups named
//! for a process that no longer exists and made more than a minute ago (`sweep_stale`). The
//! check sees this process's PID namespace only: a run in another container sharing the same
//! parent group could lose one of its groups that is empty and over a minute old (a group in
//! use cannot be removed).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which cgroup hierarchy a group is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    fn limit_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        }
    }
}

/// A memory cgroup made for one worker; removed (`rmdir`) when dropped, once its processes
/// have exited.
#[derive(Debug)]
pub struct MemoryCgroup {
    path: PathBuf,
    version: Version,
    /// The limit as the kernel keeps it (rounded down to whole pages).
    limit: u64,
}

impl MemoryCgroup {
    /// Makes a memory cgroup named `name` limited to `limit` bytes: cgroup v2 if usable, else
    /// v1. The error names what was tried and why each failed.
    pub fn create(name: &str, limit: u64) -> Result<MemoryCgroup, String> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut why = Vec::new();
        for version in [Version::V2, Version::V1] {
            let made = parent_dir(version, &mounts, &own).and_then(|parent| {
                sweep_stale(&parent, STALE_AFTER);
                make(&parent, name, version, limit)
            });
            match made {
                Ok(group) => return Ok(group),
                Err(m) => why.push(m),
            }
        }
        Err(format!(
            "--memory-limit needs a memory cgroup, and none could be made (run as root on Linux with cgroup v2's \
             memory controller or cgroup v1's memory hierarchy mounted): {}",
            why.join("; ")
        ))
    }

    /// The group's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// The limit in bytes, as the kernel keeps it.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Moves process `pid` into the group.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        let procs = self.path.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string()).map_err(|e| format!("writing {pid} to {}: {e}", procs.display()))
    }

    /// The most memory the group has been charged so far (v1 `memory.max_usage_in_bytes`, v2
    /// `memory.peak` where the kernel has it).
    pub fn peak(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        std::fs::read_to_string(self.path.join(file)).ok()?.trim().parse().ok()
    }

    /// Processes of the group the kernel's OOM killer ended (`oom_kill` in v1's
    /// `memory.oom_control`, v2's `memory.events`).
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        let text = std::fs::read_to_string(self.path.join(file)).ok()?;
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        if let Err(e) = remove(&self.path) {
            eprintln!("warning: could not remove the cgroup {}: {e}", self.path.display());
        }
    }
}

/// The name of the group this process makes for engine `engine`: `tern-bench-<pid>-<engine>`.
pub fn group_name(engine: &str) -> String {
    format!("tern-bench-{}-{engine}", std::process::id())
}

/// The process id a [`group_name`] names.
fn owner_pid(name: &str) -> Option<u32> {
    name.strip_prefix("tern-bench-")?.split('-').next()?.parse().ok()
}

/// How old a group of a gone process must be before [`sweep_stale`] removes it.
const STALE_AFTER: Duration = Duration::from_secs(60);

/// Removes the groups under `parent` that benchmark runs made and could not remove (the run was
/// killed outright): named by [`group_name`] for a process that no longer exists, and made more
/// than `age` ago. The kernel removes only empty groups, so a group with a process in it stays
/// whatever its name says; errors are ignored. Returns the groups removed.
fn sweep_stale(parent: &Path, age: Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(parent) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else { continue };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        let old = entry.metadata().ok().and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok());
        if old.is_some_and(|old| old > age) && std::fs::remove_dir(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Removes a cgroup directory, waiting up to a second for its last processes to leave it.
pub fn remove(path: &Path) -> std::io::Result<()> {
    let start = Instant::now();
    loop {
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if start.elapsed() > Duration::from_secs(1) => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// The directory of the cgroup this process is in, in hierarchy `version`, where the new group
/// goes; checked to offer the memory controller.
fn parent_dir(version: Version, mounts: &str, own: &str) -> Result<PathBuf, String> {
    let (label, mount) = match version {
        Version::V2 => ("cgroup v2", mount_point(mounts, |fs, _| fs == "cgroup2")),
        Version::V1 => (
            "cgroup v1",
            mount_point(mounts, |fs, options| fs == "cgroup" && options.split(',').any(|o| o == "memory")),
        ),
    };
    let mount = mount.ok_or_else(|| {
        format!(
            "{label}: no {} mounted",
            if version == Version::V2 { "cgroup2 file system" } else { "memory hierarchy" }
        )
    })?;
    let path =
        own_path(version, own).ok_or_else(|| format!("{label}: this process's group is not in /proc/self/cgroup"))?;
    let parent = mount.join(path.trim_start_matches('/'));
    if version == Version::V2 {
        let controllers = std::fs::read_to_string(parent.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "memory") {
            return Err(format!(
                "{label} at {}: the memory controller is not available there (controllers: {:?}; it may be bound \
                 to cgroup v1)",
                parent.display(),
                controllers.trim()
            ));
        }
        let subtree = parent.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&subtree).unwrap_or_default();
        if !enabled.split_whitespace().any(|c| c == "memory") {
            std::fs::write(&subtree, "+memory")
                .map_err(|e| format!("{label}: enabling the memory controller in {}: {e}", subtree.display()))?;
        }
    }
    Ok(parent)
}

/// The mount point of the first file system in `mounts` (`/proc/self/mounts`) that `matches`
/// (type, options); for cgroup v2 one at `/sys/fs/cgroup/unified` or `/sys/fs/cgroup` first.
fn mount_point(mounts: &str, matches: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    let found: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 4 && matches(f[2], f[3])).then(|| PathBuf::from(f[1].replace("\\040", " ")))
        })
        .collect();
    ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .iter()
        .find_map(|p| found.iter().find(|f| f.as_path() == Path::new(p)))
        .or(found.first())
        .cloned()
}

/// This process's group in hierarchy `version`, from `/proc/self/cgroup` (`0::/path` for v2,
/// `N:controllers:/path` with `memory` among the controllers for v1).
fn own_path(version: Version, own: &str) -> Option<String> {
    own.lines().find_map(|line| {
        let mut f = line.splitn(3, ':');
        let (id, controllers, path) = (f.next()?, f.next()?, f.next()?);
        let wanted = match version {
            Version::V2 => id == "0" && controllers.is_empty(),
            Version::V1 => controllers.split(',').any(|c| c == "memory"),
        };
        wanted.then(|| path.to_string())
    })
}

/// Makes group `name` under `parent` with the limit; removes it again if the limit cannot be set.
fn make(parent: &Path, name: &str, version: Version, limit: u64) -> Result<MemoryCgroup, String> {
    let label = if version == Version::V2 { "cgroup v2" } else { "cgroup v1" };
    let path = parent.join(name);
    if path.exists() {
        // Left by an earlier run with the same process id that was killed: empty, so removable.
        let _ = remove(&path);
    }
    std::fs::create_dir(&path).map_err(|e| format!("{label}: creating {}: {e}", path.display()))?;
    let mut group = MemoryCgroup { path, version, limit };
    let file = group.path.join(version.limit_file());
    std::fs::write(&file, limit.to_string()).map_err(|e| format!("{label}: writing {}: {e}", file.display()))?;
    // Best effort: not every kernel accounts swap (and with no swap there is nothing to cap).
    match version {
        Version::V2 => {
            let _ = std::fs::write(group.path.join("memory.swap.max"), "0");
        }
        Version::V1 => {
            let _ = std::fs::write(group.path.join("memory.memsw.limit_in_bytes"), limit.to_string());
        }
    }
    group.limit = std::fs::read_to_string(&file).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(limit);
    Ok(group)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
";
    const OWN: &str = "4:memory:/a/b\n1:cpu:/\n0::/\n";

    #[test]
    fn hierarchies_and_own_groups_are_found() {
        assert_eq!(mount_point(MOUNTS, |fs, _| fs == "cgroup2"), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let v1 = mount_point(MOUNTS, |fs, o| fs == "cgroup" && o.split(',').any(|o| o == "memory"));
        assert_eq!(v1, Some(PathBuf::from("/sys/fs/cgroup/memory")));
        assert_eq!(own_path(Version::V2, OWN).as_deref(), Some("/"));
        assert_eq!(own_path(Version::V1, OWN).as_deref(), Some("/a/b"));
        assert_eq!(own_path(Version::V1, "0::/\n"), None);
        assert_eq!(mount_point("proc /proc proc rw 0 0\n", |fs, _| fs == "cgroup2"), None);
    }

    #[test]
    fn a_group_names_the_process_that_made_it() {
        assert_eq!(owner_pid(&group_name("wiredtiger")), Some(std::process::id()));
        assert_eq!(owner_pid("tern-bench-17-lmdb"), Some(17));
        assert_eq!(owner_pid("tern-bench-x-lmdb"), None);
        assert_eq!(owner_pid("system.slice"), None);
    }

    #[test]
    fn only_groups_of_gone_processes_are_swept() {
        let parent = tempfile::tempdir().unwrap();
        // Above any pid_max Linux allows (2^22): no such process.
        let gone = "tern-bench-4000000000-lmdb";
        let names = [group_name("tern"), gone.to_string(), "tern-bench-4000000001-rocksdb".into(), "user".into()];
        for name in &names {
            std::fs::create_dir(parent.path().join(name)).unwrap();
        }
        // Made long ago: all but the second gone process's group.
        let long_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        for name in [&names[0], &names[1], &names[3]] {
            std::fs::File::open(parent.path().join(name)).unwrap().set_modified(long_ago).unwrap();
        }
        assert_eq!(sweep_stale(parent.path(), STALE_AFTER), 1);
        let mut left: Vec<String> =
            std::fs::read_dir(parent.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        let mut want = vec![names[0].clone(), names[2].clone(), names[3].clone()];
        want.sort();
        assert_eq!(left, want, "a live process's, a recent one's and a foreign group stay");
    }
}
