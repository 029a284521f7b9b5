//! Child processes that cannot outlive the runner: each runs in its own process group,
//! is registered globally, and is killed (whole group) on drop or on Ctrl-C.

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Process groups to SIGKILL on an emergency stop.
static GROUPS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// Running link emulators: (pid, namespace A, namespace B, linkem binary).
static LINKS: Mutex<Vec<LinkEntry>> = Mutex::new(Vec::new());
/// Set once Ctrl-C arrived: no new child may start.
static STOPPING: AtomicBool = AtomicBool::new(false);
/// The host's `tcp_allowed_congestion_control` before [`allow_congestion_controls`].
static ORIG_ALLOWED: Mutex<Option<String>> = Mutex::new(None);
/// Scratch directories to remove on an emergency stop.
static SCRATCH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// Makes `ccs` selectable as a namespace's default congestion control.
///
/// Linux lets a non-initial network namespace default only to algorithms in the global
/// `net.ipv4.tcp_allowed_congestion_control` list (here usually `reno bbr`), so Cubic
/// must be added to it; the original list is restored at exit (and on Ctrl-C).
///
/// # Errors
/// If the list cannot be read or written.
pub fn allow_congestion_controls(ccs: &[&str]) -> Result<()> {
    let orig =
        std::fs::read_to_string(ALLOWED).context("reading the allowed congestion controls")?;
    let mut list: Vec<&str> = orig.split_whitespace().collect();
    let missing: Vec<&str> = ccs.iter().copied().filter(|c| !list.contains(c)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    list.extend(&missing);
    eprintln!(
        "netbench: adding {missing:?} to net.ipv4.tcp_allowed_congestion_control (was {:?}) until exit",
        orig.trim()
    );
    lock(&ORIG_ALLOWED).get_or_insert_with(|| orig.trim().to_owned());
    std::fs::write(ALLOWED, list.join(" ")).context("setting the allowed congestion controls")
}

fn restore_allowed() {
    if let Some(orig) = lock(&ORIG_ALLOWED).take() {
        if let Err(e) = std::fs::write(ALLOWED, &orig) {
            eprintln!("netbench: cannot restore tcp_allowed_congestion_control to {orig:?}: {e}");
        }
    }
}

/// A running `ctcp-linkem`, as the emergency cleanup needs to know it.
#[derive(Clone, Debug)]
pub struct LinkEntry {
    /// Its process id.
    pub pid: i32,
    /// Namespace A.
    pub ns_a: String,
    /// Namespace B.
    pub ns_b: String,
    /// The `ctcp-linkem` binary, for `--cleanup` if it does not exit.
    pub bin: PathBuf,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// True once an interrupt started the emergency cleanup.
pub fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Installs the Ctrl-C / SIGTERM handler: kill every child, take the links down, exit 130.
///
/// # Errors
/// If a handler is already installed.
pub fn install_interrupt_handler() -> Result<()> {
    ctrlc::set_handler(|| {
        eprintln!("netbench: interrupted, cleaning up");
        emergency_cleanup();
        std::process::exit(130);
    })
    .context("installing the Ctrl-C handler")
}

/// Kills every registered process group, stops every registered link emulator and
/// restores the host's allowed congestion controls.
pub fn emergency_cleanup() {
    STOPPING.store(true, Ordering::SeqCst);
    let groups: Vec<i32> = lock(&GROUPS).clone();
    for g in groups {
        let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
    }
    let links: Vec<LinkEntry> = lock(&LINKS).clone();
    for l in &links {
        stop_link(l, |pid| {
            match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => false,
                Ok(_) | Err(Errno::ECHILD) => true,
                Err(_) => false,
            }
        });
    }
    restore_allowed();
    if std::env::var_os("NETBENCH_KEEP").is_none() {
        for d in lock(&SCRATCH).drain(..) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Registers a scratch directory for removal on Ctrl-C (normal exits remove it on drop).
pub fn register_scratch(dir: PathBuf) {
    lock(&SCRATCH).push(dir);
}

/// Registers a link emulator for the emergency cleanup.
pub fn register_link(e: LinkEntry) {
    lock(&LINKS).push(e);
}

/// Removes a link emulator from the registry.
pub fn deregister_link(pid: i32) {
    lock(&LINKS).retain(|l| l.pid != pid);
}

/// Kills whatever still runs inside the link's namespaces, sends SIGTERM to the emulator
/// and waits up to 10 s (`exited` polls it); past that, SIGKILL and `--cleanup`.
pub fn stop_link(l: &LinkEntry, mut exited: impl FnMut(i32) -> bool) {
    kill_namespace_pids(&l.ns_a);
    kill_namespace_pids(&l.ns_b);
    let _ = kill(Pid::from_raw(l.pid), Signal::SIGTERM);
    for _ in 0..200 {
        if exited(l.pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "netbench: ctcp-linkem {} ignored SIGTERM, killing it",
        l.pid
    );
    let _ = kill(Pid::from_raw(l.pid), Signal::SIGKILL);
    let _ = exited(l.pid);
    let _ = Command::new(&l.bin)
        .args(["--cleanup", "--ns-a", &l.ns_a, "--ns-b", &l.ns_b])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// SIGKILLs every process in network namespace `ns` (all of them were started by us:
/// the namespace's name is unique to this run).
fn kill_namespace_pids(ns: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() else {
        return;
    };
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if let Ok(p) = pid.parse::<i32>() {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
}

/// A command to run inside network namespace `ns`.
pub fn in_ns(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

/// A child in its own process group; dropping it kills the group and reaps the child.
pub struct Proc {
    name: String,
    child: Child,
}

impl Proc {
    /// Starts `cmd` in a new process group and registers it for the emergency cleanup.
    ///
    /// # Errors
    /// If it cannot start, or an interrupt is in progress.
    pub fn spawn(name: &str, cmd: &mut Command) -> Result<Self> {
        if stopping() {
            bail!("interrupted");
        }
        cmd.process_group(0);
        let child = cmd.spawn().with_context(|| format!("starting {name}"))?;
        let pid = i32::try_from(child.id()).context("pid out of range")?;
        lock(&GROUPS).push(pid);
        let p = Self {
            name: name.to_owned(),
            child,
        };
        if stopping() {
            bail!("interrupted");
        }
        Ok(p)
    }

    /// The process id (and process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if it has exited.
    ///
    /// # Errors
    /// From `waitpid`.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        self.child
            .try_wait()
            .with_context(|| format!("waiting for {}", self.name))
    }

    /// Waits up to `d` for it to exit; `None` if it is still running.
    ///
    /// # Errors
    /// From `waitpid`.
    pub fn wait_timeout(&mut self, d: Duration) -> Result<Option<ExitStatus>> {
        let start = ctcp_runtime::clock::now();
        loop {
            if let Some(s) = self.try_wait()? {
                return Ok(Some(s));
            }
            if start.elapsed() >= d {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `d`, kills it on timeout, and returns (status, captured stdout) —
    /// stdout must have been `Stdio::piped()` and small.
    ///
    /// # Errors
    /// From `waitpid` or reading the pipe.
    pub fn finish(mut self, d: Duration) -> Result<(Option<ExitStatus>, String)> {
        let status = self.wait_timeout(d)?;
        if status.is_none() {
            self.kill();
        }
        let mut out = String::new();
        if let Some(mut so) = self.child.stdout.take() {
            so.read_to_string(&mut out)
                .with_context(|| format!("reading the output of {}", self.name))?;
        }
        Ok((status, out))
    }

    /// Kills the process group now.
    pub fn kill(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        if let Ok(pid) = i32::try_from(self.child.id()) {
            lock(&GROUPS).retain(|&g| g != pid);
        }
    }
}

/// Runs a short command to completion (up to `d`), failing on a non-zero exit.
///
/// # Errors
/// If it cannot start, times out or fails.
pub fn run_quiet(name: &str, cmd: &mut Command, d: Duration) -> Result<String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let (status, out) = Proc::spawn(name, cmd)?.finish(d)?;
    match status {
        Some(s) if s.success() => Ok(out),
        Some(s) => bail!("{name} failed: {s}"),
        None => bail!("{name} timed out after {d:?}"),
    }
}
