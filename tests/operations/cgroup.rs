//! The broker started inside a memory-limited cgroup takes that limit as the memory
//! available (BRK-1009 names the file). As root, the test makes a child of its own group
//! in the cgroup v2 hierarchy (when the memory controller is delegated there) or in the
//! v1 memory hierarchy, writes a 512 MiB limit, and starts the broker in it; it skips
//! with a message where neither is mounted and writable. The group is removed after.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::Duration;

use crate::common::{thousands, unique, wait_until, Broker, EVENT_TIMEOUT};

const LIMIT: u64 = 512 << 20;

crate::shard_tests!(broker_in_a_limited_cgroup_uses_its_limit);

/// A cgroup this test made; removed on drop (once the broker in it is gone).
struct Group {
    dir: PathBuf,
    limit_file: PathBuf,
}

impl Drop for Group {
    fn drop(&mut self) {
        // The kernel empties the group as soon as the broker has exited.
        wait_until(Duration::from_secs(5), || {
            std::fs::remove_dir(&self.dir).is_ok()
        });
    }
}

/// The mount point of `fstype` (and, for v1, `option`) in /proc/self/mountinfo.
fn mount_point(fstype: &str, option: Option<&str>) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut tail = after.split(' ');
        let (ty, _, opts) = (tail.next()?, tail.next()?, tail.next()?);
        let root = before.split(' ').nth(3)?;
        let ok = ty == fstype && option.is_none_or(|o| opts.split(',').any(|x| x == o));
        (ok && root == "/").then(|| before.split(' ').nth(4).map(str::to_owned))?
    })
}

/// This process's group in the v2 hierarchy (`0::`) or the v1 memory one.
fn own_group(v2: bool) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (id, ctl, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = if v2 {
            id == "0" && ctl.is_empty()
        } else {
            ctl.split(',').any(|c| c == "memory")
        };
        hit.then(|| path.trim_end_matches('/').to_owned())
    })
}

/// Makes a limited child group, v2 first, or says why not.
fn make_group() -> Result<Group, String> {
    let mut why = Vec::new();
    let v2 = mount_point("cgroup2", None).zip(own_group(true));
    if let Some((mount, own)) = v2 {
        let parent = PathBuf::from(format!("{mount}{own}"));
        let delegated = std::fs::read_to_string(parent.join("cgroup.subtree_control"))
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"));
        if delegated {
            match try_group(&parent, "memory.max") {
                Ok(g) => return Ok(g),
                Err(e) => why.push(format!("cgroup v2 at {}: {e}", parent.display())),
            }
        } else {
            why.push(format!(
                "cgroup v2: the memory controller is not enabled for children of {}",
                parent.display()
            ));
        }
    } else {
        why.push("no cgroup2 mount".into());
    }
    match mount_point("cgroup", Some("memory")).zip(own_group(false)) {
        Some((mount, own)) => {
            let parent = PathBuf::from(format!("{mount}{own}"));
            try_group(&parent, "memory.limit_in_bytes")
                .map_err(|e| format!("{}; cgroup v1 at {}: {e}", why.join("; "), parent.display()))
        }
        None => Err(format!("{}; no cgroup v1 memory mount", why.join("; "))),
    }
}

fn try_group(parent: &std::path::Path, file: &str) -> Result<Group, String> {
    let dir = parent.join(unique("sluice-test"));
    std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let group = Group {
        limit_file: dir.join(file),
        dir,
    };
    std::fs::write(&group.limit_file, LIMIT.to_string())
        .map_err(|e| format!("write {}: {e}", group.limit_file.display()))?;
    Ok(group)
}

async fn broker_in_a_limited_cgroup_uses_its_limit(shards: usize) {
    let group = match make_group() {
        Ok(group) => group,
        Err(why) => {
            println!("SKIPPED: cannot run the broker in a memory-limited cgroup here: {why}");
            return;
        }
    };
    let procs = CString::new(
        group
            .dir
            .join("cgroup.procs")
            .to_string_lossy()
            .into_owned(),
    )
    .expect("path without NUL");
    let mut broker = Broker::start_prepared(shards, None, move |cmd| {
        // SAFETY: between fork and exec only async-signal-safe calls: open, write,
        // close. Writing "0" moves the writing process, the broker-to-be.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if n == 1 {
                    Ok(())
                } else {
                    Err(err)
                }
            });
        }
    });
    let in_group = std::fs::read_to_string(group.dir.join("cgroup.procs")).unwrap_or_default();
    assert!(
        in_group
            .lines()
            .any(|p| p.trim() == broker.pid().to_string()),
        "the broker is not in {}: {in_group:?}",
        group.dir.display()
    );
    let line = broker
        .wait_for_log("BRK-1009", EVENT_TIMEOUT)
        .expect("BRK-1009");
    // 40% of 512 MiB is the default high watermark; 90% of that the low one.
    let high = LIMIT * 4 / 10;
    assert!(
        line.ends_with(&format!(
            "Available : 536,870,912 bytes (cgroup limit {})",
            group.limit_file.display()
        )),
        "{line}"
    );
    assert!(
        line.contains(&format!("High : {} bytes", thousands(high))),
        "{line}"
    );
    broker.assert_healthy();
    assert_eq!(broker.stop().code(), Some(0));
    drop(group);
}
