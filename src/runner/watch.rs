//! Workspace change detection on one thread (`runner-watch`): inotify with
//! a watch per folder (added as folders appear), or, when inotify is not
//! available (no instance left, the watch limit reached) or not wanted, a
//! polling scan comparing (kind, size, mtime) of every entry.
//!
//! The thread owns the ignore rules (`.kubegateignore`, reloaded when it
//! changes) and reports only what matters, as [`Change`]s through a
//! callback: `restart` when a relevant path changed (`ignore::is_relevant`),
//! `manifest` when the root's `kubegate.toml` changed (whatever the rules
//! say: its ports are read even when it does not restart the program).
//! Folders that are excluded or ignored are not watched nor scanned. The
//! callback may wait (a bounded channel): inotify queues meanwhile, and an
//! overflow of its queue counts as a change.
//!
//! Bounds: folders deeper than `agent::wire::paths::MAX_DEPTH` are left out; the
//! polling scan looks at most [`MAX_SCAN_ENTRIES`] entries.

use super::ignore::{is_relevant, IgnoreRules, IGNORE_FILE};
use super::manifest::MANIFEST;
use crate::agent::wire::paths::MAX_DEPTH;
use crate::http::stream::{poll, Waker};
use rustix::event::{PollFd, PollFlags};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Entries the polling scan looks at, at most.
pub const MAX_SCAN_ENTRIES: usize = 200_000;

/// How changes are detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchMode {
    /// inotify, falling back to polling when it fails.
    Auto,
    /// inotify only (an error when it fails at start).
    Inotify,
    /// Polling only.
    Poll,
}

impl WatchMode {
    pub fn parse(s: &str) -> Option<WatchMode> {
        match s {
            "auto" => Some(WatchMode::Auto),
            "inotify" => Some(WatchMode::Inotify),
            "poll" => Some(WatchMode::Poll),
            _ => None,
        }
    }
}

/// Paths kept in one [`Change`] (for the log and the tests).
pub const MAX_CHANGE_PATHS: usize = 8;

/// What changed in one batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Change {
    /// A relevant path changed: the program should restart.
    pub restart: bool,
    /// `kubegate.toml` at the root changed.
    pub manifest: bool,
    /// The first relevant paths (at most [`MAX_CHANGE_PATHS`]).
    pub paths: Vec<String>,
}

impl Change {
    fn is_empty(&self) -> bool {
        !self.restart && !self.manifest
    }

    /// A file (or anything not a folder) changed at `path`. A folder's own
    /// creation or removal is not a change: the files in it are (a folder
    /// holding only ignored files must not restart anything).
    fn note(&mut self, path: &str, is_dir: bool, rules: &IgnoreRules) {
        if is_dir {
            return;
        }
        if path == MANIFEST {
            self.manifest = true;
        }
        self.relevant(path, false, rules);
    }

    /// A folder moved in or out as a whole: its files changed without an
    /// event of their own.
    fn note_moved_folder(&mut self, path: &str, rules: &IgnoreRules) {
        self.relevant(path, true, rules);
    }

    fn relevant(&mut self, path: &str, is_dir: bool, rules: &IgnoreRules) {
        if is_relevant(path, is_dir, rules) {
            self.restart = true;
            if self.paths.len() < MAX_CHANGE_PATHS && !self.paths.iter().any(|p| p == path) {
                self.paths.push(path.to_string());
            }
        }
    }
}

/// The running watcher; stops when dropped.
pub struct Watcher {
    stop: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
    /// Which mechanism started.
    pub polling: bool,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts watching `root` on a thread named `runner-watch`. Every folder
/// is watched (or the first scan is done) before this returns, so a change
/// made afterwards is seen.
pub fn start(
    root: &Path,
    mode: WatchMode,
    poll_every: Duration,
    on_change: impl Fn(Change) + Send + 'static,
) -> io::Result<Watcher> {
    start_named("runner-watch", root, mode, poll_every, on_change)
}

/// [`start`] with the thread named `thread` (`kubegate dev` watches the
/// local folder with this same watcher).
pub fn start_named(
    thread: &str,
    root: &Path,
    mode: WatchMode,
    poll_every: Duration,
    on_change: impl Fn(Change) + Send + 'static,
) -> io::Result<Watcher> {
    let root = root.to_path_buf();
    let rules = load_rules(&root);
    let stop = Arc::new(Waker::new()?);
    let source = match mode {
        WatchMode::Poll => Source::Poll(Scan::new(&root, &rules)),
        WatchMode::Inotify => {
            Source::Inotify(Inotify::new(&root, &rules).map_err(io::Error::from)?)
        }
        WatchMode::Auto => match Inotify::new(&root, &rules) {
            Ok(i) => Source::Inotify(i),
            Err(e) => {
                log::warn!("inotify unavailable ({e}); watching the workspace by polling every {poll_every:?}");
                Source::Poll(Scan::new(&root, &rules))
            }
        },
    };
    let polling = matches!(source, Source::Poll(_));
    let mut w = Worker {
        root,
        rules,
        source,
        poll_every,
        on_change: Box::new(on_change),
        allow_fallback: mode != WatchMode::Inotify,
    };
    let s = stop.clone();
    let thread = std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || w.run(&s))?;
    Ok(Watcher {
        stop,
        thread: Some(thread),
        polling,
    })
}

/// The root's `.kubegateignore` (none, unreadable or over 1 MiB: no rules,
/// with a warning for the last two). Read again by whoever needs the
/// current rules (this watcher when the file changes, `kubegate dev` at
/// every scan).
pub fn load_rules(root: &Path) -> IgnoreRules {
    let p = root.join(IGNORE_FILE);
    match std::fs::metadata(&p) {
        Ok(m) if m.len() > 1 << 20 => {
            log::warn!("{}: larger than 1 MiB; not used", p.display());
            IgnoreRules::default()
        }
        Ok(_) => match std::fs::read(&p) {
            Ok(b) => IgnoreRules::parse(&String::from_utf8_lossy(&b)),
            Err(e) => {
                log::warn!("{}: {e}; not used", p.display());
                IgnoreRules::default()
            }
        },
        Err(_) => IgnoreRules::default(),
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Whether a folder is walked into / watched.
fn walk_into(rel: &str, rules: &IgnoreRules) -> bool {
    rel.is_empty() || (is_relevant(rel, true, rules) && rel.split('/').count() <= MAX_DEPTH)
}

enum Source {
    Inotify(Inotify),
    Poll(Scan),
}

struct Worker {
    root: PathBuf,
    rules: IgnoreRules,
    source: Source,
    poll_every: Duration,
    on_change: Box<dyn Fn(Change) + Send>,
    allow_fallback: bool,
}

impl Worker {
    fn run(&mut self, stop: &Waker) {
        loop {
            let change = match &mut self.source {
                Source::Inotify(ino) => {
                    let mut fds = [
                        PollFd::new(&ino.fd, PollFlags::IN),
                        PollFd::from_borrowed_fd(stop.fd(), PollFlags::IN),
                    ];
                    if let Err(e) = poll(&mut fds, None) {
                        log::error!("watching the workspace: poll: {e}");
                        return;
                    }
                    if !fds[1].revents().is_empty() {
                        return;
                    }
                    match ino.read(&self.root, &mut self.rules) {
                        Ok(c) => c,
                        Err(e) => {
                            if !self.allow_fallback {
                                log::error!(
                                    "watching the workspace: {e}; changes are no longer seen"
                                );
                                return;
                            }
                            log::warn!("inotify failed ({e}); watching the workspace by polling every {:?}", self.poll_every);
                            self.source = Source::Poll(Scan::new(&self.root, &self.rules));
                            // Something changed (a folder could not be
                            // watched): count it.
                            Change {
                                restart: true,
                                manifest: true,
                                paths: Vec::new(),
                            }
                        }
                    }
                }
                Source::Poll(scan) => {
                    let mut fds = [PollFd::from_borrowed_fd(stop.fd(), PollFlags::IN)];
                    match poll(&mut fds, Some(self.poll_every)) {
                        Ok(0) => {}
                        Ok(_) => return,
                        Err(e) => {
                            log::error!("watching the workspace: poll: {e}");
                            return;
                        }
                    }
                    scan.rescan(&self.root, &mut self.rules)
                }
            };
            if !change.is_empty() {
                (self.on_change)(change);
            }
        }
    }
}

// ------------------------------------------------------------- inotify

const WATCH_FLAGS: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::DONT_FOLLOW)
    .union(WatchFlags::EXCL_UNLINK);

struct Inotify {
    fd: OwnedFd,
    /// Watch descriptor -> folder (relative, "" for the root).
    dirs: HashMap<i32, String>,
    buf: Vec<MaybeUninit<u8>>,
}

/// inotify cannot watch everything: out of watches or instances.
#[derive(Debug)]
struct Limit(rustix::io::Errno);

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", io::Error::from(self.0))
    }
}

impl From<Limit> for io::Error {
    fn from(l: Limit) -> io::Error {
        io::Error::from(l.0)
    }
}

impl Inotify {
    fn new(root: &Path, rules: &IgnoreRules) -> Result<Inotify, Limit> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).map_err(Limit)?;
        let mut i = Inotify {
            fd,
            dirs: HashMap::new(),
            buf: vec![MaybeUninit::uninit(); 64 * 1024],
        };
        i.add_tree(root, "", rules, &mut |_, _| {})?;
        Ok(i)
    }

    /// Watches `rel` and every folder below it that is walked into;
    /// `found` gets every entry seen, and whether it is a folder (a folder
    /// created with contents already in it: those count as changes).
    fn add_tree(
        &mut self,
        root: &Path,
        rel: &str,
        rules: &IgnoreRules,
        found: &mut dyn FnMut(&str, bool),
    ) -> Result<(), Limit> {
        let mut stack = vec![rel.to_string()];
        while let Some(dir) = stack.pop() {
            if !walk_into(&dir, rules) {
                continue;
            }
            let abs = root.join(&dir);
            match inotify::add_watch(&self.fd, &abs, WATCH_FLAGS) {
                Ok(wd) => {
                    self.dirs.insert(wd, dir.clone());
                }
                Err(e @ (rustix::io::Errno::NOSPC | rustix::io::Errno::NOMEM)) => {
                    return Err(Limit(e));
                }
                // Gone already, not a folder (a symlink), not readable.
                Err(_) => continue,
            }
            let Ok(rd) = std::fs::read_dir(&abs) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let child = join(&dir, &name);
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                found(&child, is_dir);
                if is_dir {
                    stack.push(child);
                }
            }
        }
        Ok(())
    }

    /// Forgets the watches of `rel` and below (a folder moved away).
    fn remove_tree(&mut self, rel: &str) {
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, d)| crate::agent::wire::paths::is_within(d, rel))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            let _ = inotify::remove_watch(&self.fd, wd);
        }
    }

    /// Reads what is queued; the change it makes.
    fn read(&mut self, root: &Path, rules: &mut IgnoreRules) -> Result<Change, Limit> {
        // Collect first (the reader borrows the buffer), then act.
        let mut events: Vec<(i32, ReadFlags, Option<String>)> = Vec::new();
        {
            let mut r = inotify::Reader::new(&self.fd, &mut self.buf);
            loop {
                match r.next() {
                    Ok(ev) => events.push((
                        ev.wd(),
                        ev.events(),
                        ev.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .filter(|n| !n.is_empty()),
                    )),
                    Err(rustix::io::Errno::AGAIN) => break,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        log::warn!("reading inotify events: {e}");
                        break;
                    }
                }
                if r.is_buffer_empty() {
                    break;
                }
            }
        }
        let mut change = Change::default();
        // The ignore file first: the rest of the batch is judged by it.
        let touches_rules = events.iter().any(|(wd, _, name)| {
            self.dirs.get(wd).is_some_and(|d| d.is_empty()) && name.as_deref() == Some(IGNORE_FILE)
        });
        if touches_rules {
            *rules = load_rules(root);
            log::info!("{IGNORE_FILE} changed: {} pattern(s)", rules.len());
            // Folders no longer ignored get watched.
            self.add_tree(root, "", rules, &mut |_, _| {})?;
        }
        for (wd, flags, name) in events {
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                log::warn!("inotify queue overflow: rescanning the workspace");
                change.restart = true;
                change.manifest = true;
                self.add_tree(root, "", rules, &mut |_, _| {})?;
                continue;
            }
            if flags.contains(ReadFlags::IGNORED) {
                self.dirs.remove(&wd);
                continue;
            }
            let Some(dir) = self.dirs.get(&wd).cloned() else {
                continue;
            };
            let Some(name) = name else {
                continue; // DELETE_SELF of a watched folder: its parent says it
            };
            let path = join(&dir, &name);
            let is_dir = flags.contains(ReadFlags::ISDIR);
            change.note(&path, is_dir, rules);
            if is_dir {
                if flags.intersects(ReadFlags::MOVED_FROM | ReadFlags::MOVED_TO) {
                    change.note_moved_folder(&path, rules);
                }
                if flags.intersects(ReadFlags::MOVED_FROM | ReadFlags::DELETE) {
                    self.remove_tree(&path);
                }
                if flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
                    let mut seen = Vec::new();
                    self.add_tree(root, &path, rules, &mut |p, d| {
                        seen.push((p.to_string(), d))
                    })?;
                    for (p, d) in seen {
                        change.note(&p, d, rules);
                    }
                }
            }
        }
        Ok(change)
    }
}

// ------------------------------------------------------------- polling

/// What a scan notes of an entry (symlinks are not followed: a link is an
/// entry of its own kind, neither a folder nor a file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub is_dir: bool,
    /// A regular file.
    pub is_file: bool,
    pub len: u64,
    /// mtime: seconds and nanoseconds.
    pub mtime: (i64, i64),
}

/// One walk of the tree under `root`: every entry of the folders walked
/// into (the root, and folders that are relevant and not too deep; entries
/// themselves are listed whatever the rules say of them: callers judge with
/// `ignore::is_relevant`), keyed by relative `/`-separated path. At most
/// `max_entries`; the bool says the walk stopped there.
pub fn walk_tree(
    root: &Path,
    rules: &IgnoreRules,
    max_entries: usize,
) -> (BTreeMap<String, Meta>, bool) {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        if !walk_into(&dir, rules) {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(root.join(&dir)) else {
            continue;
        };
        for e in rd.flatten() {
            if out.len() >= max_entries {
                return (out, true);
            }
            let Ok(m) = e.metadata() else {
                continue; // gone meanwhile
            };
            let rel = join(&dir, &e.file_name().to_string_lossy());
            let meta = Meta {
                is_dir: m.is_dir(),
                is_file: m.is_file(),
                len: m.len(),
                mtime: (m.mtime(), m.mtime_nsec()),
            };
            if meta.is_dir {
                stack.push(rel.clone());
            }
            out.insert(rel, meta);
        }
    }
    (out, false)
}

/// The polling scan: the last picture of the tree.
struct Scan {
    entries: BTreeMap<String, Meta>,
    warned: bool,
}

impl Scan {
    fn new(root: &Path, rules: &IgnoreRules) -> Scan {
        let mut s = Scan {
            entries: BTreeMap::new(),
            warned: false,
        };
        s.entries = s.walk(root, rules);
        s
    }

    fn walk(&mut self, root: &Path, rules: &IgnoreRules) -> BTreeMap<String, Meta> {
        let (out, truncated) = walk_tree(root, rules, MAX_SCAN_ENTRIES);
        if truncated && !self.warned {
            self.warned = true;
            log::warn!("the workspace has more than {MAX_SCAN_ENTRIES} entries; polling looks at the first ones only");
        }
        out
    }

    fn rescan(&mut self, root: &Path, rules: &mut IgnoreRules) -> Change {
        let new = self.walk(root, rules);
        let mut change = Change::default();
        let mut changed: Vec<(&String, bool)> = Vec::new();
        for (p, m) in &new {
            if self.entries.get(p) != Some(m) {
                changed.push((p, m.is_dir));
            }
        }
        for (p, m) in &self.entries {
            if !new.contains_key(p) {
                changed.push((p, m.is_dir));
            }
        }
        if changed.iter().any(|(p, _)| p.as_str() == IGNORE_FILE) {
            *rules = load_rules(root);
            log::info!("{IGNORE_FILE} changed: {} pattern(s)", rules.len());
        }
        for (p, is_dir) in changed {
            change.note(p, is_dir, rules);
        }
        self.entries = new;
        change
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{unbounded, Receiver};
    use std::time::Instant;

    fn temp_root(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "kubegate-watch-{tag}-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    /// Changes until one satisfies `f` (within 10 s); every change seen
    /// on the way, that one included.
    fn until(rx: &Receiver<Change>, f: impl Fn(&Change) -> bool) -> Vec<Change> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let c = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no such change within 10 s; saw {seen:?}"));
            let done = f(&c);
            seen.push(c);
            if done {
                return seen;
            }
        }
    }

    fn names(seen: &[Change]) -> Vec<&str> {
        seen.iter()
            .flat_map(|c| c.paths.iter().map(String::as_str))
            .collect()
    }

    fn exercise(mode: WatchMode) {
        let root = temp_root(match mode {
            WatchMode::Poll => "poll",
            _ => "inotify",
        });
        std::fs::write(root.join(IGNORE_FILE), "*.log\n").expect("write");
        std::fs::create_dir_all(root.join(".git")).expect("mkdir");
        std::fs::create_dir_all(root.join("node_modules/x")).expect("mkdir");
        let (tx, rx) = unbounded();
        let w = start(&root, mode, Duration::from_millis(20), move |c| {
            let _ = tx.send(c);
        })
        .expect("watcher");
        assert_eq!(w.polling, mode == WatchMode::Poll);

        // Ignored and excluded writes, then a relevant one: nothing names
        // the ignored paths, and every change on the way restarts for a
        // relevant path only.
        std::fs::write(root.join("x.log"), "a").expect("write");
        std::fs::write(root.join(".git/HEAD"), "a").expect("write");
        std::fs::write(root.join("node_modules/x/i.js"), "a").expect("write");
        // A new folder holding only ignored files is no change either.
        std::fs::create_dir_all(root.join("logs/old")).expect("mkdir");
        std::fs::write(root.join("logs/old/a.log"), "a").expect("write");
        std::fs::write(root.join("app.js"), "a").expect("write");
        let seen = until(&rx, |c| c.paths.iter().any(|p| p == "app.js"));
        assert_eq!(names(&seen), vec!["app.js"], "{seen:?}");
        assert!(seen.iter().all(|c| c.restart && !c.manifest), "{seen:?}");

        // A new folder with a file in it, then a change of that file
        // (its folder is watched by now).
        std::fs::create_dir_all(root.join("src/deep")).expect("mkdir");
        std::fs::write(root.join("src/deep/a.rs"), "x").expect("write");
        until(&rx, |c| c.paths.iter().any(|p| p == "src/deep/a.rs"));
        std::fs::write(root.join("src/deep/b.rs"), "xy").expect("write");
        until(&rx, |c| c.paths.iter().any(|p| p == "src/deep/b.rs"));

        // A folder moved in as a whole: its files are changes.
        let outside = temp_root("outside");
        std::fs::create_dir_all(outside.join("pkg")).expect("mkdir");
        std::fs::write(outside.join("pkg/f.txt"), "x").expect("write");
        std::fs::rename(outside.join("pkg"), root.join("moved")).expect("rename");
        until(&rx, |c| c.paths.iter().any(|p| p.starts_with("moved")));
        let _ = std::fs::remove_dir_all(&outside);

        // The ignore file is a change, and rules apply from then on; the
        // manifest is reported even when ignored.
        std::fs::write(root.join(IGNORE_FILE), "*.log\nkubegate.toml\n").expect("write");
        until(&rx, |c| c.paths.iter().any(|p| p == IGNORE_FILE));
        std::fs::write(root.join(MANIFEST), "[[app]]\n").expect("write");
        let seen = until(&rx, |c| c.manifest);
        assert!(!names(&seen).contains(&MANIFEST), "{seen:?}");
        drop(w);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn inotify_reports_relevant_changes_only() {
        exercise(WatchMode::Inotify);
    }

    #[test]
    fn polling_reports_relevant_changes_only() {
        exercise(WatchMode::Poll);
    }

    #[test]
    fn modes_parse() {
        assert_eq!(WatchMode::parse("auto"), Some(WatchMode::Auto));
        assert_eq!(WatchMode::parse("poll"), Some(WatchMode::Poll));
        assert_eq!(WatchMode::parse("inotify"), Some(WatchMode::Inotify));
        assert_eq!(WatchMode::parse("fsevents"), None);
    }
}
