//! `kubegate install-self DEST` as a real process (docs/runner.md
//! "install-self"): the copy runs, is 0755, a second run replaces it by a
//! rename (a program started from the old copy keeps running), and bad
//! input gets `kubegate: CODE: message` with exit 2 (usage) or 1 (I/O).

mod common;

use common::{temp_dir, KUBEGATE};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};

fn install(dest: &std::path::Path) -> std::process::Output {
    Command::new(KUBEGATE)
        .arg("install-self")
        .arg(dest)
        .output()
        .expect("run kubegate install-self")
}

#[test]
fn the_copy_runs_is_executable_and_is_replaced_atomically() {
    let dir = temp_dir("install-self");
    let dest = dir.join("kubegate/bin");
    let out = install(&dest);
    assert!(out.status.success(), "{out:?}");
    let copy = dest.join("kubegate");
    let m = std::fs::metadata(&copy).expect("installed");
    assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    let exe = std::fs::metadata(KUBEGATE).unwrap();
    assert_eq!(m.len(), exe.len());
    if m.dev() == exe.dev() {
        assert_eq!(m.ino(), exe.ino(), "one filesystem: a hard link, no copy");
    }

    let v = Command::new(&copy).arg("--version").output().unwrap();
    assert!(v.status.success(), "{v:?}");
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("kubegate {}", env!("CARGO_PKG_VERSION"))
    );
    let h = Command::new(&copy)
        .args(["app-runner", "--help"])
        .output()
        .unwrap();
    assert!(h.status.success(), "{h:?}");

    // A program running from the copy while it is replaced: the second run
    // succeeds (no "text file busy"), the old one keeps running, and no
    // temporary file is left. (On one filesystem the copy is a hard link
    // to the running binary, the same inode both times.)
    let mut running = Command::new(&copy)
        .args(["app-runner", "--", "sleep", "30"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let ino = m.ino();
    let out = install(&dest);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::metadata(&copy).unwrap().ino(), ino);
    assert!(
        running.try_wait().unwrap().is_none(),
        "the old copy runs on"
    );
    let names: Vec<String> = std::fs::read_dir(&dest)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["kubegate"]);
    let v = Command::new(&copy).arg("--version").output().unwrap();
    assert!(v.status.success(), "{v:?}");
    let _ = running.kill();
    let _ = running.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_gets_a_code_and_an_exit_status() {
    let dir = temp_dir("install-self-bad");
    for (args, code, want) in [
        (vec![], 2, "kubegate: USAGE: missing DEST"),
        (vec!["a", "b"], 2, "kubegate: USAGE: unexpected argument"),
        (vec!["--force", "a"], 2, "kubegate: USAGE: unknown option"),
    ] {
        let out = Command::new(KUBEGATE)
            .arg("install-self")
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.starts_with(want), "{args:?}: {err}");
    }
    // DEST is a file: an I/O error, exit 1.
    let file = dir.join("file");
    std::fs::write(&file, b"").unwrap();
    let out = install(&file);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("kubegate: LOCAL_IO: creating "), "{err}");
    let out = Command::new(KUBEGATE)
        .args(["install-self", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("install-self DEST"));
    let _ = std::fs::remove_dir_all(&dir);
}
