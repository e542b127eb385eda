//! The project folder of `kubegate dev`: its manifest (`kubegate.toml`,
//! read by `runner::manifest::parse_manifest`, the parser of the same file
//! the app runner reads in the pod) turned into the apps of a start
//! request and checked with the daemon's own validation
//! (`session::spec`), and its files (what `runner::ignore::is_relevant`
//! keeps: not `.git`, `node_modules`, `__pycache__`, `.kubegate`, nor what
//! `.kubegateignore` names) within the bundle limits, read into the
//! bundle. Everything here happens before anything is sent.

use super::super::CliError;
use crate::agent::wire::WriteItem;
use crate::exit::codes;
use crate::runner::ignore::is_relevant;
use crate::runner::manifest::{parse_manifest, MANIFEST, MAX_MANIFEST_BYTES};
use crate::runner::watch::{load_rules, walk_tree, Meta, MAX_SCAN_ENTRIES};
use crate::session::spec::{
    validate_apps, validate_env_and_image, AppRequest, BundleLimits, BundleRequest, Encoding,
    FileRequest, Io, PortRequest, StartRequest,
};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The files of the folder as last read or synced: path -> what the scan
/// saw (size, mtime). A file whose entry differs is sent again.
pub type Picture = BTreeMap<String, Meta>;

/// A project ready to start.
#[derive(Debug, Clone)]
pub struct Project {
    pub dir: PathBuf,
    /// `DIR/kubegate.toml`, for messages.
    pub manifest_path: PathBuf,
    pub apps: Vec<AppRequest>,
    pub env: BTreeMap<String, String>,
    pub image: Option<String>,
}

fn manifest_error(path: &Path, m: impl std::fmt::Display) -> CliError {
    CliError::new(codes::MANIFEST, format!("{}: {m}", path.display()))
}

fn bundle_error(m: impl Into<String>) -> CliError {
    CliError::new("INVALID_BUNDLE", m)
}

impl Project {
    /// Reads and checks `DIR/kubegate.toml`.
    pub fn load(dir: &Path) -> Result<Project, CliError> {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(CliError::usage(format!(
                    "{} is not a folder",
                    dir.display()
                )))
            }
            Err(e) => return Err(CliError::usage(format!("{}: {e}", dir.display()))),
        }
        let path = dir.join(MANIFEST);
        let text = read_manifest(&path)?;
        let m = parse_manifest(&text).map_err(|e| manifest_error(&path, e))?;
        let apps: Vec<AppRequest> = m
            .apps
            .into_iter()
            .map(|a| AppRequest {
                name: a.name,
                entry: a.entry,
                command: a.command,
                image: None,
                ports: (!a.ports.is_empty()).then(|| {
                    a.ports
                        .iter()
                        .map(|p| PortRequest {
                            port: i64::from(p.port),
                            protocol: Some(p.protocol),
                        })
                        .collect()
                }),
                io: a.io,
                runner: a.runner,
            })
            .collect();
        // The daemon's own checks, so a bad name or a port conflict is a
        // message about the manifest and nothing is started.
        validate_apps(apps.clone())
            .map_err(|e| manifest_error(&path, format!("{}: {}", e.code.as_str(), e.message)))?;
        validate_env_and_image(&m.env, m.image.as_deref())
            .map_err(|e| manifest_error(&path, format!("{}: {}", e.code.as_str(), e.message)))?;
        Ok(Project {
            dir: dir.to_path_buf(),
            manifest_path: path,
            apps,
            env: m.env,
            image: m.image,
        })
    }

    pub fn names(&self) -> Vec<String> {
        self.apps.iter().map(|a| a.name.clone()).collect()
    }

    /// The io of app `i` (the daemon's default, tty, when unsaid).
    pub fn io(&self, i: usize) -> Io {
        self.apps.get(i).and_then(|a| a.io).unwrap_or_default()
    }

    /// The app that gets what is typed: `--stdin APP`, else the first tty
    /// app, else the first app. An unknown name is a usage error.
    pub fn stdin_app(&self, asked: Option<&str>) -> Result<usize, CliError> {
        match asked {
            Some(name) => self
                .apps
                .iter()
                .position(|a| a.name == name)
                .ok_or_else(|| {
                    CliError::usage(format!(
                        "--stdin {name:?}: {} declares no such app (its apps: {})",
                        self.manifest_path.display(),
                        self.names().join(", ")
                    ))
                }),
            None => Ok((0..self.apps.len())
                .find(|&i| self.io(i) == Io::Tty)
                .unwrap_or(0)),
        }
    }

    /// The start request with `files` as its bundle.
    pub fn start_request(&self, files: Vec<FileRequest>) -> StartRequest {
        StartRequest {
            apps: self.apps.clone(),
            env: self.env.clone(),
            bundle: BundleRequest { files },
            image: self.image.clone(),
            pull_policy: None,
        }
    }

    /// The folder's files within `limits`, read: the bundle and the picture
    /// the sync starts from. Sizes are checked from the scan before a byte
    /// is read, so a folder far over the limits costs nothing; every app's
    /// entry must be among the files (the daemon refuses a start otherwise,
    /// since the app would wait for it forever).
    pub fn bundle(&self, limits: &BundleLimits) -> Result<(Vec<FileRequest>, Picture), CliError> {
        let scan = scan(&self.dir)?;
        check_limits(&scan.files, limits)?;
        for a in &self.apps {
            if !scan.files.contains_key(&a.entry) {
                return Err(manifest_error(
                    &self.manifest_path,
                    format!(
                        "app {:?}: its entry {:?} is not a file of {} (or .kubegateignore leaves it out)",
                        a.name,
                        a.entry,
                        self.dir.display()
                    ),
                ));
            }
        }
        if !scan.left_out.is_empty() {
            eprintln!(
                "kubegate: warning: {} entr{} neither a file nor a folder left out (symlinks are not followed): {}",
                scan.left_out.len(),
                if scan.left_out.len() == 1 { "y" } else { "ies" },
                scan.left_out.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            );
        }
        let mut files = Vec::with_capacity(scan.files.len());
        let mut picture = Picture::new();
        for (path, meta) in scan.files {
            let Some(bytes) = read_file(&self.dir, &path, limits.max_file_bytes)? else {
                continue; // gone since the scan
            };
            files.push(file_request(&path, bytes));
            picture.insert(path, meta);
        }
        Ok((files, picture))
    }
}

fn read_manifest(path: &Path) -> Result<String, CliError> {
    let f = std::fs::File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            manifest_error(
                path,
                "not found: kubegate dev needs a kubegate.toml with at least one [[app]] (name, entry, command); see examples/hello-two-apps",
            )
        } else {
            manifest_error(path, e)
        }
    })?;
    let mut raw = Vec::new();
    f.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(|e| manifest_error(path, e))?;
    if raw.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(manifest_error(
            path,
            format!("larger than {MAX_MANIFEST_BYTES} bytes"),
        ));
    }
    String::from_utf8(raw).map_err(|_| manifest_error(path, "not UTF-8 text"))
}

/// What a scan of the folder keeps.
pub struct Scan {
    /// Relevant regular files.
    pub files: Picture,
    /// Relevant entries that are neither files nor folders (symlinks,
    /// sockets): left out.
    pub left_out: Vec<String>,
}

/// Scans `dir` with its current `.kubegateignore` (read again each time:
/// an edit of the rules applies to the next sync).
pub fn scan(dir: &Path) -> Result<Scan, CliError> {
    let rules = load_rules(dir);
    let (entries, truncated) = walk_tree(dir, &rules, MAX_SCAN_ENTRIES);
    if truncated {
        return Err(bundle_error(format!(
            "{} holds more than {MAX_SCAN_ENTRIES} entries kubegate dev would look at; leave folders out with .kubegateignore",
            dir.display()
        )));
    }
    let mut files = Picture::new();
    let mut left_out = Vec::new();
    for (path, meta) in entries {
        if meta.is_dir || !is_relevant(&path, false, &rules) {
            continue;
        }
        if meta.is_file {
            files.insert(path, meta);
        } else {
            left_out.push(path);
        }
    }
    Ok(Scan { files, left_out })
}

/// The bundle limits on the scan's sizes (the defaults of docs/config.md#sessions-watch-sessions
/// unless told otherwise), the message saying what to leave out.
pub fn check_limits(files: &Picture, limits: &BundleLimits) -> Result<(), CliError> {
    let hint = "leave files out with .kubegateignore";
    if files.len() as u64 > limits.max_files {
        return Err(bundle_error(format!(
            "the folder holds {} files, more than the {} a session's bundle may have; {hint}",
            files.len(),
            limits.max_files
        )));
    }
    if let Some((path, m)) = files.iter().find(|(_, m)| m.len > limits.max_file_bytes) {
        return Err(bundle_error(format!(
            "{path} is {} bytes, more than the {} one file of a bundle may have; {hint}",
            m.len, limits.max_file_bytes
        )));
    }
    let total: u64 = files.values().map(|m| m.len).sum();
    if total > limits.max_bundle_bytes {
        return Err(bundle_error(format!(
            "the folder's files hold {total} bytes, more than the {} a bundle may have; {hint}",
            limits.max_bundle_bytes
        )));
    }
    Ok(())
}

/// Reads one file of the folder (at most `max` bytes: it may have grown
/// since the scan); `None` when it is gone.
pub fn read_file(dir: &Path, path: &str, max: u64) -> Result<Option<Vec<u8>>, CliError> {
    let full = dir.join(path);
    let f = match std::fs::File::open(&full) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(super::super::local_io(
                &format!("reading {}", full.display()),
                e,
            ))
        }
    };
    let mut bytes = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| super::super::local_io(&format!("reading {}", full.display()), e))?;
    if bytes.len() as u64 > max {
        return Err(bundle_error(format!(
            "{path} grew past {max} bytes, the most one file of a bundle may have"
        )));
    }
    Ok(Some(bytes))
}

/// A bundle file: text as it is, anything else as base64.
pub fn file_request(path: &str, bytes: Vec<u8>) -> FileRequest {
    match String::from_utf8(bytes) {
        Ok(text) => FileRequest {
            path: path.to_string(),
            content: text,
            encoding: None,
        },
        Err(e) => {
            let w = WriteItem::bytes(path, e.as_bytes());
            FileRequest {
                path: w.path,
                content: w.content,
                encoding: Some(Encoding::Base64),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("kubegate-dev-project-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const TWO_APPS: &str = r#"
[[app]]
name = "web"
entry = "web.py"
command = ["python3", "web.py"]
ports = [8080]
io = "streams"

[[app]]
name = "worker"
entry = "worker.sh"
io = "tty"
"#;

    #[test]
    fn a_project_becomes_a_start_request() {
        let d = temp("ok");
        std::fs::write(d.join(MANIFEST), TWO_APPS).unwrap();
        std::fs::write(d.join("web.py"), "print(1)\n").unwrap();
        std::fs::write(d.join("worker.sh"), "echo hi\n").unwrap();
        std::fs::write(d.join("blob.bin"), [0xff, 0x00, 0xfe]).unwrap();
        std::fs::write(d.join(".kubegateignore"), "*.log\n").unwrap();
        std::fs::write(d.join("x.log"), "left out").unwrap();
        std::fs::create_dir_all(d.join(".git")).unwrap();
        std::fs::write(d.join(".git/HEAD"), "ref").unwrap();
        std::fs::create_dir_all(d.join("node_modules/m")).unwrap();
        std::fs::write(d.join("node_modules/m/i.js"), "x").unwrap();

        let p = Project::load(&d).unwrap();
        assert_eq!(p.names(), ["web", "worker"]);
        assert_eq!(p.stdin_app(None).unwrap(), 1, "the first tty app");
        assert_eq!(p.stdin_app(Some("web")).unwrap(), 0);
        let e = p.stdin_app(Some("nope")).unwrap_err();
        assert!(e.is_usage() && e.message.contains("web, worker"), "{e}");

        let limits = BundleLimits::default();
        let (files, picture) = p.bundle(&limits).unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                ".kubegateignore",
                "blob.bin",
                "kubegate.toml",
                "web.py",
                "worker.sh"
            ]
        );
        assert_eq!(picture.len(), files.len());
        let blob = files.iter().find(|f| f.path == "blob.bin").unwrap();
        assert_eq!(
            (blob.encoding, blob.content.as_str()),
            (Some(Encoding::Base64), "/wD+")
        );
        // The request round-trips through the daemon's strict parser.
        let body = serde_json::to_vec(&p.start_request(files)).unwrap();
        let (spec, bundle) = crate::session::spec::parse_start(&body, limits).unwrap();
        assert_eq!(spec.apps.len(), 2);
        assert_eq!(
            spec.apps[0].ports,
            vec![crate::session::spec::Port::tcp(8080)]
        );
        assert_eq!(bundle.files.len(), 5);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn bad_projects_say_what_is_wrong() {
        let d = temp("bad");
        let e = Project::load(&d).unwrap_err();
        assert!(e.is_config() && e.message.contains("not found"), "{e}");
        for (text, needle) in [
            ("[[app]\n", "TOML parse error"),
            ("[[app]]\nname = \"Web\"\nentry = \"a\"\n", "INVALID_APP_NAME"),
            (
                "[[app]]\nname = \"a\"\nentry = \"a\"\nports = [8080]\n[[app]]\nname = \"b\"\nentry = \"b\"\nports = [8080]\n",
                "PORT_CONFLICT",
            ),
            ("[env]\nPOD_IP = \"x\"\n[[app]]\nname = \"a\"\nentry = \"a\"\n", "POD_IP"),
        ] {
            std::fs::write(d.join(MANIFEST), text).unwrap();
            let e = Project::load(&d).unwrap_err();
            assert!(e.is_config(), "{text:?}: {e}");
            assert!(e.message.contains(needle), "{text:?}: {e}");
            assert!(e.message.contains("kubegate.toml"), "{text:?}: {e}");
        }
        // The entry must be in the folder.
        std::fs::write(
            d.join(MANIFEST),
            "[[app]]\nname = \"a\"\nentry = \"main.sh\"\n",
        )
        .unwrap();
        let p = Project::load(&d).unwrap();
        let limits = BundleLimits::default();
        let e = p.bundle(&limits).unwrap_err();
        assert!(e.is_config() && e.message.contains("main.sh"), "{e}");
        // Over the limits, judged from sizes alone.
        std::fs::write(d.join("main.sh"), "echo\n").unwrap();
        let f = std::fs::File::create(d.join("big.bin")).unwrap();
        f.set_len(limits.max_file_bytes + 1).unwrap();
        let e = p.bundle(&limits).unwrap_err();
        assert_eq!(e.code, "INVALID_BUNDLE", "{e}");
        assert!(e.message.contains("big.bin"), "{e}");
        let small = BundleLimits {
            max_bundle_bytes: 100,
            max_file_bytes: 100,
            max_files: 2,
        };
        std::fs::remove_file(d.join("big.bin")).unwrap();
        std::fs::write(d.join("a"), "x").unwrap();
        let e = p.bundle(&small).unwrap_err();
        assert!(e.message.contains("3 files"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
