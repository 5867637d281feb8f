//! Owns: finding the memory limit of this process's own cgroup, on cgroup v1, v2 and
//! hybrid hosts — which group the process is in (`/proc/self/cgroup`), where each
//! hierarchy is mounted (`/proc/self/mountinfo`), and the smallest limit on the way from
//! that group up to the mount's root, with the file it was read from.
//!
//! Does not: read the machine's RAM or resolve watermarks (`memory` does), or read any
//! file itself: every read goes through the `read` function it is given, so the tests
//! feed it fake file contents.

/// A memory limit found in a cgroup file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupLimit {
    /// The limit, bytes.
    pub bytes: u64,
    /// The file it was read from (`…/memory.max` or `…/memory.limit_in_bytes`).
    pub file: String,
}

/// At or above this, a v1 `memory.limit_in_bytes` means "no limit": the kernel reports
/// its page-counter maximum (9223372036854771712 with 4 KiB pages) rounded to the page
/// size, not a round `u64::MAX`, so anything from 2^62 up is taken as unlimited.
const V1_UNLIMITED: u64 = 1 << 62;

/// Which hierarchy a group or a mount belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hierarchy {
    /// A v1 hierarchy with the `memory` controller.
    V1Memory,
    /// The unified (v2) hierarchy.
    V2,
}

impl Hierarchy {
    fn limit_file(self) -> &'static str {
        match self {
            Hierarchy::V1Memory => "memory.limit_in_bytes",
            Hierarchy::V2 => "memory.max",
        }
    }

    /// The limit a limit file states, `None` when it states none.
    fn parse(self, text: &str) -> Option<u64> {
        let text = text.trim();
        match self {
            Hierarchy::V2 if text == "max" => None,
            Hierarchy::V2 => text.parse().ok(),
            Hierarchy::V1Memory => text.parse().ok().filter(|&b| b < V1_UNLIMITED),
        }
    }

    /// The mount point used when `/proc/self/mountinfo` cannot be read.
    fn default_mount(self) -> Mount {
        let point = match self {
            Hierarchy::V1Memory => "/sys/fs/cgroup/memory",
            Hierarchy::V2 => "/sys/fs/cgroup",
        };
        Mount {
            hierarchy: self,
            root: "/".to_owned(),
            point: point.to_owned(),
        }
    }
}

/// A cgroup filesystem mount: `root` is the group of the hierarchy shown at `point`
/// (not `/` inside some containers, which mount only their own subtree).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mount {
    hierarchy: Hierarchy,
    root: String,
    point: String,
}

/// The memory limit of this process's cgroup, if any: for each hierarchy the process is
/// in (the v1 memory controller's and the v2 one; a hybrid host has both), the limit of
/// its own group and of each parent up to the mount's root, and of all those the
/// smallest. `read` reads a file's text.
pub fn cgroup_limit(read: &dyn Fn(&str) -> Option<String>) -> Option<CgroupLimit> {
    let groups = own_groups(&read("/proc/self/cgroup")?);
    let mounts = read("/proc/self/mountinfo")
        .map(|text| parse_mountinfo(&text))
        .unwrap_or_default();
    let mut best: Option<CgroupLimit> = None;
    for (hierarchy, group) in groups {
        let found = mounts
            .iter()
            .filter(|m| m.hierarchy == hierarchy)
            .find_map(|m| relative(&group, &m.root).map(|rel| (m.clone(), rel)));
        let (mount, rel) = match found {
            Some(found) => found,
            // No mountinfo (or the group is outside every mount): the usual place.
            None if mounts.is_empty() => (hierarchy.default_mount(), group.clone()),
            None => continue,
        };
        for dir in ancestors(&mount.point, &rel) {
            let file = format!("{dir}/{}", hierarchy.limit_file());
            let Some(bytes) = read(&file).and_then(|t| hierarchy.parse(&t)) else {
                continue;
            };
            if best.as_ref().is_none_or(|b| bytes < b.bytes) {
                best = Some(CgroupLimit { bytes, file });
            }
        }
    }
    best
}

/// The process's group in each hierarchy that can limit memory, from
/// `/proc/self/cgroup`: `N:memory:/path` or `N:cpu,memory:/path` (v1), `0::/path` (v2).
fn own_groups(text: &str) -> Vec<(Hierarchy, String)> {
    let mut groups = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim().to_owned();
        if id == "0" && controllers.is_empty() {
            groups.push((Hierarchy::V2, path));
        } else if controllers.split(',').any(|c| c == "memory") {
            groups.push((Hierarchy::V1Memory, path));
        }
    }
    groups
}

/// The cgroup mounts in `/proc/self/mountinfo`: `ID PARENT MAJ:MIN ROOT POINT OPTIONS
/// [OPTIONAL…] - FSTYPE SOURCE SUPER_OPTIONS`.
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = before.split(' ').collect();
        let (Some(root), Some(point)) = (fields.get(3), fields.get(4)) else {
            continue;
        };
        let mut tail = after.split(' ');
        let fstype = tail.next().unwrap_or_default();
        let super_options = tail.nth(1).unwrap_or_default();
        let hierarchy = match fstype {
            "cgroup2" => Hierarchy::V2,
            "cgroup" if super_options.split(',').any(|o| o == "memory") => Hierarchy::V1Memory,
            _ => continue,
        };
        mounts.push(Mount {
            hierarchy,
            root: unescape(root),
            point: unescape(point),
        });
    }
    mounts
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let value = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(value as u8);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `group` as seen below a mount of `root`: `/a/b` under root `/a` is `/b`; `None` when
/// the group is not inside the mounted subtree.
fn relative(group: &str, root: &str) -> Option<String> {
    let root = root.trim_end_matches('/');
    if root.is_empty() {
        return Some(group.to_owned());
    }
    match group.strip_prefix(root) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => Some(rest.to_owned()),
        _ => None,
    }
}

/// The directories from the group (`point` + `rel`) up to the mount point, innermost
/// first.
fn ancestors(point: &str, rel: &str) -> Vec<String> {
    let point = point.trim_end_matches('/');
    let mut dirs = Vec::new();
    let mut rel = rel.trim_end_matches('/').to_owned();
    loop {
        dirs.push(format!("{point}{rel}"));
        match rel.rfind('/') {
            Some(at) => rel.truncate(at),
            None => break,
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:7 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
";
    const V2_MOUNTS: &str =
        "30 23 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
    const UNLIMITED_V1: &str = "9223372036854771712\n";

    fn fake(files: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let files: Vec<(String, String)> = files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect();
        move |path: &str| {
            files
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, t)| t.clone())
        }
    }

    fn limit(bytes: u64, file: &str) -> Option<CgroupLimit> {
        Some(CgroupLimit {
            bytes,
            file: file.to_owned(),
        })
    }

    #[test]
    fn v2_takes_the_smallest_on_the_way_up() {
        let service = fake(&[
            ("/proc/self/cgroup", "0::/system.slice/sluice.service\n"),
            ("/proc/self/mountinfo", V2_MOUNTS),
            (
                "/sys/fs/cgroup/system.slice/sluice.service/memory.max",
                "8589934592\n",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "max\n"),
        ]);
        assert_eq!(
            cgroup_limit(&service),
            limit(
                8 << 30,
                "/sys/fs/cgroup/system.slice/sluice.service/memory.max"
            )
        );
        let slice = fake(&[
            ("/proc/self/cgroup", "0::/system.slice/sluice.service\n"),
            ("/proc/self/mountinfo", V2_MOUNTS),
            (
                "/sys/fs/cgroup/system.slice/sluice.service/memory.max",
                "max",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "4294967296"),
        ]);
        assert_eq!(
            cgroup_limit(&slice),
            limit(4 << 30, "/sys/fs/cgroup/system.slice/memory.max")
        );
        let unlimited = fake(&[
            ("/proc/self/cgroup", "0::/user.slice\n"),
            ("/proc/self/mountinfo", V2_MOUNTS),
            ("/sys/fs/cgroup/user.slice/memory.max", "max\n"),
        ]);
        assert_eq!(cgroup_limit(&unlimited), None);
    }

    #[test]
    fn v1_reads_the_own_group_not_the_root() {
        // The case of issue 18: the root says unlimited, the group 512 MiB.
        let docker = fake(&[
            (
                "/proc/self/cgroup",
                "12:pids:/docker/abc\n4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n",
            ),
            ("/proc/self/mountinfo", V1_MOUNTS),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", UNLIMITED_V1),
            ("/sys/fs/cgroup/memory/docker/memory.limit_in_bytes", UNLIMITED_V1),
            ("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "536870912\n"),
        ]);
        assert_eq!(
            cgroup_limit(&docker),
            limit(
                512 << 20,
                "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"
            )
        );
        // The controller co-mounted with others (`N:cpu,memory:/path`).
        let comounted = fake(&[
            ("/proc/self/cgroup", "3:cpu,memory:/batch\n"),
            (
                "/proc/self/mountinfo",
                "40 31 0:40 / /sys/fs/cgroup/cpu,memory rw - cgroup cgroup rw,cpu,memory\n",
            ),
            (
                "/sys/fs/cgroup/cpu,memory/batch/memory.limit_in_bytes",
                "1073741824",
            ),
        ]);
        assert_eq!(
            cgroup_limit(&comounted),
            limit(
                1 << 30,
                "/sys/fs/cgroup/cpu,memory/batch/memory.limit_in_bytes"
            )
        );
    }

    #[test]
    fn nested_groups_take_the_parents_limit_when_it_is_smaller() {
        let nested = fake(&[
            (
                "/proc/self/cgroup",
                "4:memory:/kubepods/burstable/pod1/ctr\n",
            ),
            ("/proc/self/mountinfo", V1_MOUNTS),
            (
                "/sys/fs/cgroup/memory/kubepods/burstable/pod1/ctr/memory.limit_in_bytes",
                UNLIMITED_V1,
            ),
            (
                "/sys/fs/cgroup/memory/kubepods/burstable/pod1/memory.limit_in_bytes",
                "268435456",
            ),
            (
                "/sys/fs/cgroup/memory/kubepods/burstable/memory.limit_in_bytes",
                "1073741824",
            ),
            (
                "/sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes",
                UNLIMITED_V1,
            ),
        ]);
        assert_eq!(
            cgroup_limit(&nested),
            limit(
                256 << 20,
                "/sys/fs/cgroup/memory/kubepods/burstable/pod1/memory.limit_in_bytes"
            )
        );
    }

    #[test]
    fn hybrid_hosts_take_the_smaller_of_both_hierarchies() {
        let mounts = format!(
            "{V1_MOUNTS}41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
        );
        let v1_limited = fake(&[
            (
                "/proc/self/cgroup",
                "4:memory:/app\n1:name=systemd:/app\n0::/app\n",
            ),
            ("/proc/self/mountinfo", &mounts),
            (
                "/sys/fs/cgroup/memory/app/memory.limit_in_bytes",
                "536870912",
            ),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", UNLIMITED_V1),
            // On hybrid hosts the unified tree has no memory controller: no memory.max.
        ]);
        assert_eq!(
            cgroup_limit(&v1_limited),
            limit(512 << 20, "/sys/fs/cgroup/memory/app/memory.limit_in_bytes")
        );
        // Never the v2 path of a v1 layout (`/sys/fs/cgroup/app/memory.max`), and a v2
        // limit under /sys/fs/cgroup/unified counts when it is the smaller.
        let both = fake(&[
            ("/proc/self/cgroup", "4:memory:/app\n0::/app\n"),
            ("/proc/self/mountinfo", &mounts),
            ("/sys/fs/cgroup/app/memory.max", "1"),
            (
                "/sys/fs/cgroup/memory/app/memory.limit_in_bytes",
                "536870912",
            ),
            ("/sys/fs/cgroup/unified/app/memory.max", "268435456"),
        ]);
        assert_eq!(
            cgroup_limit(&both),
            limit(256 << 20, "/sys/fs/cgroup/unified/app/memory.max")
        );
    }

    #[test]
    fn a_container_mounting_its_own_subtree_reads_from_the_mount_point() {
        // Without a cgroup namespace the container sees its group's full path, but the
        // mount's root is that group: the file is at the mount point itself.
        let container = fake(&[
            ("/proc/self/cgroup", "0::/docker/abc\n"),
            (
                "/proc/self/mountinfo",
                "50 40 0:27 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
            ),
            ("/sys/fs/cgroup/memory.max", "1073741824"),
        ]);
        assert_eq!(
            cgroup_limit(&container),
            limit(1 << 30, "/sys/fs/cgroup/memory.max")
        );
        // With a namespace it sees `/`.
        let ns = fake(&[
            ("/proc/self/cgroup", "0::/\n"),
            ("/proc/self/mountinfo", V2_MOUNTS),
            ("/sys/fs/cgroup/memory.max", "1073741824"),
        ]);
        assert_eq!(
            cgroup_limit(&ns),
            limit(1 << 30, "/sys/fs/cgroup/memory.max")
        );
    }

    #[test]
    fn without_mountinfo_the_usual_mount_points_are_read() {
        let files = fake(&[
            ("/proc/self/cgroup", "0::/svc\n"),
            ("/sys/fs/cgroup/svc/memory.max", "2147483648"),
        ]);
        assert_eq!(
            cgroup_limit(&files),
            limit(2 << 30, "/sys/fs/cgroup/svc/memory.max")
        );
        assert_eq!(cgroup_limit(&|_: &str| None), None);
        // Garbage does not count as a limit.
        let garbage = fake(&[
            ("/proc/self/cgroup", "nonsense\n0::/svc\n"),
            ("/sys/fs/cgroup/svc/memory.max", "lots"),
        ]);
        assert_eq!(cgroup_limit(&garbage), None);
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/sys/fs/my\040cgroup"), "/sys/fs/my cgroup");
        assert_eq!(unescape(r"/a\\b"), r"/a\\b");
        assert_eq!(relative("/a/b", "/a"), Some("/b".to_owned()));
        assert_eq!(relative("/ab", "/a"), None);
        assert_eq!(relative("/a", "/a"), Some(String::new()));
        assert_eq!(ancestors("/m/", "/x/y"), vec!["/m/x/y", "/m/x", "/m"]);
        assert_eq!(ancestors("/m", "/"), vec!["/m"]);
    }
}
