//! The configuration file's tests: defaults, every key's rules and the
//! error locations.

use super::*;
use crate::api::Workspace;

const DEMO_DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn minimal() -> String {
    "[cluster]\nmode = \"sim\"\n".to_string()
}

fn parse(text: &str) -> Result<Config, KeyError> {
    Config::parse(text, Path::new("/etc/kubegate"))
}

fn key_of(text: &str) -> String {
    let e = parse(text).expect_err("must fail");
    e.key
}

fn with_principal(body: &str) -> String {
    format!("{}\n[[principal]]\n{body}\n", minimal())
}

#[test]
fn defaults() {
    let c = parse(&minimal()).unwrap();
    assert_eq!(c.server.listen_addr(), "127.0.0.1:7443".parse().unwrap());
    assert_eq!(c.server.max_connections, 1024);
    assert_eq!(c.server.state_dir, PathBuf::from("/var/lib/kubegate"));
    assert_eq!(c.server.shutdown_grace_secs, 10);
    assert_eq!(c.cluster.mode, ClusterMode::Sim);
    assert_eq!(c.cluster.managed_by, "kubegate");
    assert_eq!(c.exec, ExecSection::default());
    assert_eq!(c.exec.max_command_args, 64);
    assert_eq!(c.exec.max_arg_bytes, 8192);
    assert_eq!(c.exec.max_command_bytes, 32768);
    assert_eq!(c.exec.max_output_bytes, 1 << 20);
    assert_eq!(c.exec.default_output_bytes, 1 << 20);
    assert_eq!(c.exec.max_stdin_frame_bytes, 65536);
    assert_eq!(c.exec.workspace_uid_label, "kubegate.dev/workspace-uid");
    assert!(c.principals.is_empty());
}

#[test]
fn cluster_section_is_required() {
    let e = parse("").unwrap_err();
    assert!(e.message.contains("cluster"), "{e:?}");
}

#[test]
fn unknown_keys_are_named() {
    assert_eq!(
        key_of(&format!("{}bogus = 1\n", minimal())),
        "cluster.bogus"
    );
    assert_eq!(
        key_of(&format!("[server]\nlisten_addr = \"x\"\n{}", minimal())),
        "server.listen_addr"
    );
    assert_eq!(key_of(&format!("{}[nope]\na = 1\n", minimal())), "nope");
    assert_eq!(
        key_of(&format!("{}[cluster.sim]\nnamespace = []\n", minimal())),
        "cluster.sim.namespace"
    );
    assert_eq!(
        key_of(&format!("{}[exec]\nmax_args = 3\n", minimal())),
        "exec.max_args"
    );
    let e = parse(&with_principal(&format!(
        "name = \"a\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\nquota = 1"
    )))
    .unwrap_err();
    assert_eq!(e.key, "principal[0].quota", "{e:?}");
}

#[test]
fn bad_types_are_named() {
    assert_eq!(
        key_of(&format!(
            "[server]\nmax_connections = \"many\"\n{}",
            minimal()
        )),
        "server.max_connections"
    );
    assert_eq!(
        key_of(&format!("[server]\nmax_connections = -1\n{}", minimal())),
        "server.max_connections"
    );
    assert_eq!(key_of("[cluster]\nmode = \"cloud\"\n"), "cluster.mode");
}

#[test]
fn listen_address() {
    let e = parse(&format!("[server]\nlisten = \"localhost\"\n{}", minimal())).unwrap_err();
    assert_eq!(e.key, "server.listen");
    assert!(e.message.contains("IP:PORT"), "{e:?}");
    let c = parse(&format!("[server]\nlisten = \"[::1]:0\"\n{}", minimal())).unwrap();
    assert_eq!(c.server.listen_addr().port(), 0);
}

#[test]
fn positive_integers() {
    for k in [
        "max_connections",
        "keep_alive_idle_secs",
        "request_read_timeout_secs",
        "shutdown_grace_secs",
    ] {
        assert_eq!(
            key_of(&format!("[server]\n{k} = 0\n{}", minimal())),
            format!("server.{k}")
        );
    }
    for k in [
        "max_command_args",
        "max_arg_bytes",
        "max_command_bytes",
        "default_output_bytes",
        "max_output_bytes",
        "max_stdin_frame_bytes",
        "output_channel_frames",
    ] {
        assert_eq!(
            key_of(&format!("{}[exec]\n{k} = 0\n", minimal())),
            format!("exec.{k}")
        );
    }
}

#[test]
fn disk_bounds_of_recordings_and_the_audit_log() {
    let c = parse(&minimal()).unwrap();
    assert_eq!(c.exec.recording_max_bytes, 64 << 20);
    assert_eq!(c.exec.recording_min_free_bytes, 1 << 30);
    assert_eq!(c.exec.audit_max_bytes, 256 << 20);
    for k in ["recording_max_bytes", "audit_max_bytes"] {
        for v in [0, 4095] {
            let e = parse(&format!("{}[exec]\n{k} = {v}\n", minimal())).unwrap_err();
            assert_eq!(e.key, format!("exec.{k}"));
            assert!(e.message.contains("at least 4096"), "{e:?}");
        }
    }
    let c = parse(&format!(
        "{}[exec]\nrecording_max_bytes = 4096\naudit_max_bytes = 4096\nrecording_min_free_bytes = 0\n",
        minimal()
    ))
    .unwrap();
    assert_eq!(c.exec.recording_max_bytes, 4096);
    assert_eq!(c.exec.recording_min_free_bytes, 0, "0: no floor");
    assert_eq!(
        key_of(&format!(
            "{}[exec]\nrecording_min_free_bytes = -1\n",
            minimal()
        )),
        "exec.recording_min_free_bytes"
    );
}

#[test]
fn output_default_within_maximum() {
    let e = parse(&format!(
        "{}[exec]\ndefault_output_bytes = 2048\nmax_output_bytes = 1024\n",
        minimal()
    ))
    .unwrap_err();
    assert_eq!(e.key, "exec.default_output_bytes");
}

#[test]
fn tls_needs_both_files_and_they_must_exist() {
    assert_eq!(
        key_of(&format!("[server]\ntls_cert = \"c.pem\"\n{}", minimal())),
        "server.tls_key"
    );
    assert_eq!(
        key_of(&format!("[server]\ntls_key = \"k.pem\"\n{}", minimal())),
        "server.tls_cert"
    );
    let e = parse(&format!(
        "[server]\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n{}",
        minimal()
    ))
    .unwrap_err();
    assert_eq!(e.key, "server.tls_cert");
    assert!(e.message.contains("/etc/kubegate/c.pem"), "{e:?}");
}

#[test]
fn relative_paths_resolve_against_the_config_folder() {
    let text = "[server]\nstate_dir = \"./state\"\n[cluster]\nmode = \"kubeconfig\"\nkubeconfig = \"kc.yaml\"\ncontext = \"x\"\n[exec]\naudit_log = \"/var/log/a.jsonl\"\n";
    let c = parse(text).unwrap();
    assert_eq!(c.server.state_dir, PathBuf::from("/etc/kubegate/state"));
    assert_eq!(
        c.cluster.kubeconfig,
        Some(PathBuf::from("/etc/kubegate/kc.yaml"))
    );
    assert_eq!(c.cluster.context.as_deref(), Some("x"));
    assert_eq!(c.exec.audit_log, Some(PathBuf::from("/var/log/a.jsonl")));
    let c = parse("[cluster]\nmode = \"sim\"\n[exec]\naudit_log = \"audit.jsonl\"\n").unwrap();
    assert_eq!(
        c.exec.audit_log,
        Some(PathBuf::from("/etc/kubegate/audit.jsonl"))
    );
    assert_eq!(
        key_of("[server]\nstate_dir = \"\"\n[cluster]\nmode = \"sim\"\n"),
        "server.state_dir"
    );
}

#[test]
fn kubeconfig_keys_only_in_kubeconfig_mode() {
    assert_eq!(
        key_of("[cluster]\nmode = \"sim\"\nkubeconfig = \"x\"\n"),
        "cluster.kubeconfig"
    );
    assert_eq!(
        key_of("[cluster]\nmode = \"in-cluster\"\ncontext = \"x\"\n"),
        "cluster.context"
    );
    assert!(parse("[cluster]\nmode = \"in-cluster\"\n").is_ok());
    assert!(parse("[cluster]\nmode = \"kubeconfig\"\n").is_ok());
    assert_eq!(
        key_of("[cluster]\nmode = \"kubeconfig\"\ncontext = \" \"\n"),
        "cluster.context"
    );
}

#[test]
fn managed_by_and_label_key() {
    assert_eq!(
        key_of("[cluster]\nmode = \"sim\"\nmanaged_by = \"\"\n"),
        "cluster.managed_by"
    );
    assert_eq!(
        key_of("[cluster]\nmode = \"sim\"\nmanaged_by = \"a b\"\n"),
        "cluster.managed_by"
    );
    assert_eq!(
        key_of(&format!(
            "[cluster]\nmode = \"sim\"\nmanaged_by = \"{}\"\n",
            "x".repeat(64)
        )),
        "cluster.managed_by"
    );
    assert!(parse("[cluster]\nmode = \"sim\"\nmanaged_by = \"My.Tool_1\"\n").is_ok());
    assert_eq!(
        key_of(&format!(
            "{}[exec]\nworkspace_uid_label = \"Bad_Prefix/x\"\n",
            minimal()
        )),
        "exec.workspace_uid_label"
    );
    assert_eq!(
        key_of(&format!(
            "{}[exec]\nworkspace_uid_label = \"x/\"\n",
            minimal()
        )),
        "exec.workspace_uid_label"
    );
    assert_eq!(
        key_of(&format!(
            "{}[exec]\nworkspace_uid_label = \"app.kubernetes.io/managed-by\"\n",
            minimal()
        )),
        "exec.workspace_uid_label"
    );
    let c = parse(&format!(
        "{}[exec]\nworkspace_uid_label = \"example.com/ws\"\n",
        minimal()
    ))
    .unwrap();
    assert_eq!(c.exec.workspace_uid_label, "example.com/ws");
}

#[test]
fn sim_section() {
    let c = parse("[cluster]\nmode = \"sim\"\n[cluster.sim]\nnamespaces = [\"a\", \"b-2\"]\nfail_images = [\"bad/*\"]\n").unwrap();
    assert_eq!(c.cluster.sim.namespaces, vec!["a", "b-2"]);
    assert_eq!(c.cluster.sim.fail_images, vec!["bad/*"]);
    assert_eq!(c.cluster.sim.request_log, None);
    let c =
        parse("[cluster]\nmode = \"sim\"\n[cluster.sim]\nrequest_log = \"req.jsonl\"\n").unwrap();
    assert!(c
        .cluster
        .sim
        .request_log
        .as_ref()
        .is_some_and(|p| p.is_absolute() && p.ends_with("req.jsonl")));
    assert_eq!(
        key_of("[cluster]\nmode = \"sim\"\n[cluster.sim]\nrequest_log = \"\"\n"),
        "cluster.sim.request_log"
    );
    assert_eq!(
        c.cluster.sim.uid_range(),
        Some(crate::sim::pod_users::DEFAULT_UID_RANGE)
    );
    let c = parse("[cluster]\nmode = \"sim\"\n[cluster.sim]\nuid_range = \"1000-1999\"\npods_dir = \"/srv/pods\"\n").unwrap();
    assert_eq!(c.cluster.sim.uid_range(), Some((1000, 1999)));
    assert_eq!(c.cluster.sim.pods_dir, Some(PathBuf::from("/srv/pods")));
    let c = parse("[cluster]\nmode = \"sim\"\n[cluster.sim]\nuid_range = \"off\"\n").unwrap();
    assert_eq!(c.cluster.sim.uid_range(), None);
    assert_eq!(
        key_of("[cluster]\nmode = \"sim\"\n[cluster.sim]\nuid_range = \"9-1\"\n"),
        "cluster.sim.uid_range"
    );
    assert_eq!(
        key_of("[cluster]\nmode = \"sim\"\n[cluster.sim]\nnamespaces = [\"ok\", \"Not_OK\"]\n"),
        "cluster.sim.namespaces[1]"
    );
    assert_eq!(
        key_of("[cluster]\nmode = \"sim\"\n[cluster.sim]\nfail_images = [\"\"]\n"),
        "cluster.sim.fail_images[0]"
    );
}

#[test]
fn principals() {
    let text = with_principal(&format!(
        "name = \"demo\"\ntoken_sha256 = \"{}\"\nworkspaces = [\"demo/demo-uid\", \"p2/u/with/slashes\"]\nmay_start_sessions = true",
        "AB".repeat(32)
    ));
    let c = parse(&text).unwrap();
    let p = &c.principals[0];
    assert_eq!(p.name, "demo");
    assert_eq!(p.token_sha256, "ab".repeat(32));
    assert!(p.may_start_sessions);
    assert_eq!(
        p.workspaces[0],
        Workspace {
            project: "demo".into(),
            uid: "demo-uid".into()
        }
    );
    assert_eq!(p.workspaces[1].uid, "u/with/slashes");
    let c = parse(&with_principal(&format!(
        "name = \"x\"\ntoken_sha256 = \"{DEMO_DIGEST}\""
    )))
    .unwrap();
    assert!(!c.principals[0].may_start_sessions);
    assert!(c.principals[0].workspaces.is_empty());
}

#[test]
fn clear_text_tokens_are_refused() {
    let e = parse(&with_principal(
        "name = \"a\"\ntoken = \"kubegate-demo-token\"",
    ))
    .unwrap_err();
    assert_eq!(e.key, "principal[0].token", "{e:?}");
    assert!(e.message.contains("token_sha256"), "{e:?}");
    assert!(
        !e.message.contains("kubegate-demo-token"),
        "the secret is echoed: {e:?}"
    );
}

#[test]
fn token_digest_rules() {
    assert_eq!(
        key_of(&with_principal("name = \"a\"")),
        "principal[0].token_sha256"
    );
    assert_eq!(
        key_of(&with_principal("name = \"a\"\ntoken_sha256 = \"abc\"")),
        "principal[0].token_sha256"
    );
    assert_eq!(
        key_of(&with_principal(&format!(
            "name = \"a\"\ntoken_sha256 = \"{}\"",
            "g".repeat(64)
        ))),
        "principal[0].token_sha256"
    );
    let two = format!(
        "{}[[principal]]\nname = \"a\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\n[[principal]]\nname = \"b\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\n",
        minimal()
    );
    assert_eq!(key_of(&two), "principal[1].token_sha256");
}

#[test]
fn principal_names() {
    assert_eq!(
        key_of(&with_principal(&format!(
            "name = \"\"\ntoken_sha256 = \"{DEMO_DIGEST}\""
        ))),
        "principal[0].name"
    );
    let two = format!(
        "{}[[principal]]\nname = \"a\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\n[[principal]]\nname = \"a\"\ntoken_sha256 = \"{}\"\n",
        minimal(),
        "1".repeat(64)
    );
    assert_eq!(key_of(&two), "principal[1].name");
    let e = parse(&with_principal(&format!(
        "token_sha256 = \"{DEMO_DIGEST}\""
    )))
    .unwrap_err();
    assert!(e.message.contains("name"), "{e:?}");
}

#[test]
fn workspace_strings() {
    for bad in ["demo", "Demo/x", "demo/", "demo/  ", "-x/u", "/u"] {
        let e = parse(&with_principal(&format!(
            "name = \"a\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\nworkspaces = [\"ok/u\", \"{bad}\"]"
        )))
        .unwrap_err();
        assert_eq!(e.key, "principal[0].workspaces[1]", "{bad}: {e:?}");
    }
    let long = format!("p/{}", "u".repeat(257));
    assert!(Workspace::parse(&long).is_err());
    assert!(Workspace::parse(&format!("p/{}", "u".repeat(256))).is_ok());
    assert!(Workspace::parse(&format!("{}/u", "p".repeat(64))).is_err());
    let dup = with_principal(&format!(
        "name = \"a\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\nworkspaces = [\"p/u\", \"p/u\"]"
    ));
    assert_eq!(key_of(&dup), "principal[0].workspaces[1]");
}

fn demo_principal(extra: &str) -> String {
    format!("[[principal]]\nname = \"demo\"\ntoken_sha256 = \"{DEMO_TOKEN_SHA256}\"\n{extra}")
}

#[test]
fn the_demo_token_is_allowed_alone_in_sim_mode_on_loopback() {
    let c = parse(&format!("{}{}", minimal(), demo_principal(""))).unwrap();
    assert_eq!(c.demo_token_principal(), Some("demo"));
    let upper = format!(
        "{}[[principal]]\nname = \"d\"\ntoken_sha256 = \"{}\"\n",
        minimal(),
        DEMO_TOKEN_SHA256.to_ascii_uppercase()
    );
    assert_eq!(parse(&upper).unwrap().demo_token_principal(), Some("d"));
    let v6 = format!(
        "[server]\nlisten = \"[::1]:0\"\n{}{}",
        minimal(),
        demo_principal("")
    );
    assert!(parse(&v6).is_ok());
    let own = with_principal(&format!(
        "name = \"a\"\ntoken_sha256 = \"{}\"",
        "1".repeat(64)
    ));
    assert_eq!(parse(&own).unwrap().demo_token_principal(), None);
}

#[test]
fn the_demo_token_is_refused_outside_sim_mode() {
    for mode in ["kubeconfig", "in-cluster"] {
        let text = format!("[cluster]\nmode = \"{mode}\"\n{}", demo_principal(""));
        let e = parse(&text).unwrap_err();
        assert_eq!(e.key, "principal[0].token_sha256", "{e:?}");
        assert!(e.message.contains("demo token"), "{e:?}");
        assert!(e.message.contains("mode = \"sim\""), "{e:?}");
        assert!(!e.message.contains("kubegate-demo-token"), "{e:?}");
    }
}

#[test]
fn the_demo_token_is_refused_on_a_front_door_beyond_loopback() {
    for listen in ["0.0.0.0:7443", "192.0.2.1:7443", "[::]:7443"] {
        let text = format!(
            "[server]\nlisten = \"{listen}\"\n{}{}",
            minimal(),
            demo_principal("")
        );
        let e = parse(&text).unwrap_err();
        assert_eq!(e.key, "principal[0].token_sha256", "{listen}: {e:?}");
        assert!(e.message.contains("loopback"), "{e:?}");
    }
}

#[test]
fn the_demo_token_is_refused_beside_another_principal() {
    let other = format!(
        "[[principal]]\nname = \"b\"\ntoken_sha256 = \"{}\"\n",
        "2".repeat(64)
    );
    for text in [
        format!("{}{}{other}", minimal(), demo_principal("")),
        format!("{}{other}{}", minimal(), demo_principal("")),
    ] {
        let e = parse(&text).unwrap_err();
        assert!(e.key.ends_with("].token_sha256"), "{e:?}");
        assert!(e.message.contains("one principal"), "{e:?}");
    }
    let e = parse(&format!("{}{other}{}", minimal(), demo_principal(""))).unwrap_err();
    assert_eq!(e.key, "principal[1].token_sha256");
}

#[test]
fn key_at_finds_sections_and_indices() {
    let t = "[a]\nx = 1\n[[p]]\ny = 2\n[[p]]\nz = 3\n";
    assert_eq!(key_at(t, t.find("x").unwrap()), "a.x");
    assert_eq!(key_at(t, t.find("y").unwrap()), "p[0].y");
    assert_eq!(key_at(t, t.find("z").unwrap()), "p[1].z");
    assert_eq!(key_at(t, t.find("3").unwrap()), "p[1].z");
    assert_eq!(key_at("top = 1\n", 0), "top");
}

#[test]
fn session_defaults() {
    let c = parse(&minimal()).unwrap();
    assert_eq!(c.sessions, SessionsSection::default());
    let ss = &c.sessions;
    assert_eq!(ss.idle_secs, 300);
    assert_eq!(ss.max_life_secs, 21600);
    assert_eq!(ss.suspended_ttl_secs, 86400);
    assert_eq!(ss.checkpoint_interval_secs, 30);
    assert_eq!(ss.reloads_per_minute, 30);
    assert_eq!(ss.max_bundle_bytes, 64 << 20);
    assert_eq!(ss.max_file_bytes, 8 << 20);
    assert_eq!(ss.max_files, 10_000);
    assert_eq!(ss.io_ring_bytes, 1 << 20);
    assert_eq!(ss.sse_history_events, 1000);
    assert_eq!(ss.orphan_grace_secs, 600);
    assert_eq!(ss.start_deadline_secs, 180);
    assert_eq!(ss.agent_deadline_secs, 120);
    assert!(ss.app_runner);
    let k = &c.cluster;
    assert_eq!(k.session_namespace, "default");
    assert!(k.workspace_image.starts_with("ghcr.io/kubegate/kubegate:"));
    assert!(k.workspace_image.ends_with(env!("CARGO_PKG_VERSION")));
    assert_eq!(k.default_app_image, DEFAULT_APP_IMAGE);
    assert_eq!(k.default_app_command, vec!["sh", "$(KUBEGATE_ENTRY)"]);
    assert_eq!(k.ingress_base_domain, None);
    assert_eq!(k.ingress_class, None);
    assert_eq!(k.ingress_tls_secret, None);
    assert_eq!((k.max_cpu.as_str(), k.max_memory.as_str()), ("1", "1Gi"));
    assert_eq!(k.max_ephemeral_storage, "2Gi");
}

#[test]
fn pod_access_defaults_by_mode() {
    let access = |t: &str| parse(t).unwrap().cluster.pod_access();
    assert_eq!(
        access("[cluster]\nmode = \"sim\"\n"),
        PodAccessMode::ApiProxy
    );
    assert_eq!(
        access("[cluster]\nmode = \"kubeconfig\"\n"),
        PodAccessMode::ApiProxy
    );
    assert_eq!(
        access("[cluster]\nmode = \"in-cluster\"\n"),
        PodAccessMode::Direct
    );
    assert_eq!(
        access("[cluster]\nmode = \"in-cluster\"\npod_access = \"api-proxy\"\n"),
        PodAccessMode::ApiProxy
    );
    assert_eq!(
        access("[cluster]\nmode = \"sim\"\npod_access = \"direct\"\n"),
        PodAccessMode::Direct
    );
    assert_eq!(
        key_of("[cluster]\nmode = \"sim\"\npod_access = \"tunnel\"\n"),
        "cluster.pod_access"
    );
}

#[test]
fn session_cluster_keys() {
    let bad = |line: &str| key_of(&format!("{}{line}\n", minimal()));
    assert_eq!(
        bad("session_namespace = \"Bad_NS\""),
        "cluster.session_namespace"
    );
    assert_eq!(bad("session_namespace = \"\""), "cluster.session_namespace");
    assert_eq!(bad("workspace_image = \"\""), "cluster.workspace_image");
    assert_eq!(bad("workspace_image = \"a b\""), "cluster.workspace_image");
    assert_eq!(
        bad("default_app_image = \"x\ty\""),
        "cluster.default_app_image"
    );
    assert_eq!(
        bad("default_app_command = []"),
        "cluster.default_app_command"
    );
    assert_eq!(
        bad("default_app_command = [\" \"]"),
        "cluster.default_app_command"
    );
    assert_eq!(
        bad("ingress_base_domain = \"Example.COM\""),
        "cluster.ingress_base_domain"
    );
    assert_eq!(
        bad("ingress_base_domain = \"a..b\""),
        "cluster.ingress_base_domain"
    );
    // Class and TLS secret only make sense with a base domain.
    assert_eq!(bad("ingress_class = \"nginx\""), "cluster.ingress_class");
    assert_eq!(
        bad("ingress_tls_secret = \"tls\""),
        "cluster.ingress_tls_secret"
    );
    assert_eq!(
        bad("ingress_base_domain = \"dev.example.com\"\ningress_class = \"Nginx\""),
        "cluster.ingress_class"
    );
    for k in ["max_cpu", "max_memory", "max_ephemeral_storage"] {
        assert_eq!(bad(&format!("{k} = \"lots\"")), format!("cluster.{k}"));
        assert_eq!(bad(&format!("{k} = \"0\"")), format!("cluster.{k}"));
        assert_eq!(bad(&format!("{k} = \"-1\"")), format!("cluster.{k}"));
    }
    let c = parse(&format!(
        "{}session_namespace = \"dev\"\nworkspace_image = \"reg.local/kg:1\"\ndefault_app_image = \"node:22\"\ndefault_app_command = [\"node\", \"--watch\", \"$(KUBEGATE_ENTRY)\"]\ningress_base_domain = \"dev.example.com\"\ningress_class = \"nginx\"\ningress_tls_secret = \"wildcard-tls\"\nmax_cpu = \"500m\"\nmax_memory = \"512Mi\"\nmax_ephemeral_storage = \"1G\"\n",
        minimal()
    ))
    .unwrap();
    let k = &c.cluster;
    assert_eq!(k.session_namespace, "dev");
    assert_eq!(k.workspace_image, "reg.local/kg:1");
    assert_eq!(k.default_app_command[1], "--watch");
    assert_eq!(k.ingress_base_domain.as_deref(), Some("dev.example.com"));
    assert_eq!(k.ingress_class.as_deref(), Some("nginx"));
    assert_eq!(k.ingress_tls_secret.as_deref(), Some("wildcard-tls"));
    assert_eq!(k.max_cpu, "500m");
}

#[test]
fn sessions_section() {
    assert_eq!(
        key_of(&format!("{}[sessions]\nidle = 3\n", minimal())),
        "sessions.idle"
    );
    assert_eq!(
        key_of(&format!("{}[sessions]\nidle_secs = \"5m\"\n", minimal())),
        "sessions.idle_secs"
    );
    for k in [
        "max_sessions",
        "max_sessions_per_principal",
        "idle_secs",
        "max_life_secs",
        "suspended_ttl_secs",
        "checkpoint_interval_secs",
        "reloads_per_minute",
        "max_bundle_bytes",
        "max_file_bytes",
        "max_files",
        "io_ring_bytes",
        "sse_history_events",
        "orphan_grace_secs",
        "start_deadline_secs",
        "agent_deadline_secs",
    ] {
        assert_eq!(
            key_of(&format!("{}[sessions]\n{k} = 0\n", minimal())),
            format!("sessions.{k}")
        );
    }
    assert_eq!(
        key_of(&format!(
            "{}[sessions]\nmax_sessions = 4\nmax_sessions_per_principal = 5\n",
            minimal()
        )),
        "sessions.max_sessions_per_principal"
    );
    assert_eq!(
        key_of(&format!(
            "{}[sessions]\nmax_bundle_bytes = 1024\nmax_file_bytes = 2048\n",
            minimal()
        )),
        "sessions.max_file_bytes"
    );
    assert_eq!(
        key_of(&format!(
            "{}[sessions]\nmax_life_secs = 400000000\n",
            minimal()
        )),
        "sessions.max_life_secs"
    );
    let c = parse(&format!(
        "{}[sessions]\nidle_secs = 60\nmax_files = 5\n",
        minimal()
    ))
    .unwrap();
    assert_eq!(c.sessions.idle_secs, 60);
    assert_eq!(c.sessions.max_files, 5);
    assert_eq!(c.sessions.max_life_secs, 21600);
}

#[test]
fn the_app_runner_is_on_unless_turned_off() {
    assert!(parse(&minimal()).unwrap().sessions.app_runner);
    let c = parse(&format!("{}[sessions]\napp_runner = false\n", minimal())).unwrap();
    assert!(!c.sessions.app_runner);
    assert_eq!(
        key_of(&format!("{}[sessions]\napp_runner = 1\n", minimal())),
        "sessions.app_runner"
    );
}

#[test]
fn error_display_names_file_and_key() {
    let e = ConfigError {
        file: "/x/k.toml".into(),
        key: "server.listen".into(),
        message: "bad".into(),
    };
    assert_eq!(e.to_string(), "/x/k.toml: server.listen: bad");
}

#[test]
fn routing_resolves_from_the_configuration_alone() {
    let layer = |lines: &str| {
        parse(&format!("{}{lines}\n", minimal()))
            .unwrap()
            .cluster
            .routing()
    };
    assert_eq!(layer(""), RoutingLayer::None);
    assert_eq!(
        layer("base_domain = \"dev.example.com\""),
        RoutingLayer::Ingress
    );
    // The older name is an alias.
    let c = parse(&format!(
        "{}ingress_base_domain = \"dev.example.com\"\n",
        minimal()
    ))
    .unwrap();
    assert_eq!(c.cluster.routing(), RoutingLayer::Ingress);
    assert_eq!(c.cluster.base_domain(), Some("dev.example.com"));
    assert_eq!(
        layer("base_domain = \"dev.example.com\"\ngateway = \"infra/public\""),
        RoutingLayer::Gateway
    );
    let c = parse(&format!(
        "{}routing = \"gateway\"\ningress_base_domain = \"d.io\"\ngateway = \"infra/public\"\ngateway_section = \"https\"\n",
        minimal()
    ))
    .unwrap();
    assert_eq!(c.cluster.routing(), RoutingLayer::Gateway);
    assert_eq!(c.cluster.gateway_ref(), Some(("infra", "public")));
    assert_eq!(c.cluster.gateway_section.as_deref(), Some("https"));
    assert_eq!(c.cluster.base_domain(), Some("d.io"));
    assert_eq!(
        layer("routing = \"ingress\"\nbase_domain = \"d.io\"\ningress_class = \"nginx\""),
        RoutingLayer::Ingress
    );
    assert_eq!(layer("routing = \"none\""), RoutingLayer::None);
}

#[test]
fn each_routing_refusal_names_its_key() {
    let refusal = |lines: &str| {
        let e = parse(&format!("{}{lines}\n", minimal())).unwrap_err();
        (e.key, e.message)
    };
    // Both layers under `auto`: refused naming `routing`.
    for ingress in [
        "ingress_base_domain = \"d.io\"",
        "base_domain = \"d.io\"\ningress_class = \"nginx\"",
        "base_domain = \"d.io\"\ningress_tls_secret = \"tls\"",
    ] {
        let (k, m) = refusal(&format!("gateway = \"infra/gw\"\n{ingress}"));
        assert_eq!(k, "cluster.routing", "{ingress}: {m}");
        assert!(m.contains("routing = \"gateway\""), "{m}");
    }
    let keys = [
        // The alias and its new name together.
        (
            "base_domain = \"a.io\"\ningress_base_domain = \"b.io\"",
            "cluster.ingress_base_domain",
        ),
        ("base_domain = \"A..io\"", "cluster.base_domain"),
        ("ingress_base_domain = \"A..io\"", "cluster.ingress_base_domain"),
        // An Ingress TLS secret (or class) with gateway routing.
        (
            "routing = \"gateway\"\nbase_domain = \"d.io\"\ngateway = \"infra/gw\"\ningress_tls_secret = \"tls\"",
            "cluster.ingress_tls_secret",
        ),
        (
            "routing = \"gateway\"\nbase_domain = \"d.io\"\ngateway = \"infra/gw\"\ningress_class = \"nginx\"",
            "cluster.ingress_class",
        ),
        // Gateway routing needs its Gateway and a domain.
        ("routing = \"gateway\"\nbase_domain = \"d.io\"", "cluster.gateway"),
        ("gateway = \"infra/gw\"", "cluster.base_domain"),
        ("routing = \"ingress\"", "cluster.base_domain"),
        (
            "routing = \"ingress\"\nbase_domain = \"d.io\"\ngateway = \"infra/gw\"",
            "cluster.gateway",
        ),
        ("routing = \"none\"\nbase_domain = \"d.io\"", "cluster.base_domain"),
        ("routing = \"none\"\ngateway = \"infra/gw\"", "cluster.gateway"),
        ("routing = \"sideways\"", "cluster.routing"),
        // The Gateway's shape.
        ("base_domain = \"d.io\"\ngateway = \"gw\"", "cluster.gateway"),
        ("base_domain = \"d.io\"\ngateway = \"Infra/gw\"", "cluster.gateway"),
        ("base_domain = \"d.io\"\ngateway = \"infra/g/w\"", "cluster.gateway"),
        ("base_domain = \"d.io\"\ngateway = \"/gw\"", "cluster.gateway"),
        (
            "base_domain = \"d.io\"\ngateway = \"infra/gw\"\ngateway_section = \"Bad_Name\"",
            "cluster.gateway_section",
        ),
        ("base_domain = \"d.io\"\ngateway_section = \"https\"", "cluster.gateway_section"),
    ];
    for (lines, key) in keys {
        assert_eq!(refusal(lines).0, key, "{lines}");
    }
}

#[test]
fn impersonation_groups_and_names() {
    let p = |groups: &str| {
        with_principal(&format!(
            "name = \"ann\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\nkube_groups = [{groups}]"
        ))
    };
    let c = parse(&p("\"kubegate:developers\"")).unwrap();
    assert_eq!(c.principals[0].kube_groups, ["kubegate:developers"]);
    assert!(!c.cluster.impersonate);
    // system: groups are never impersonated (system:masters is cluster-admin).
    assert_eq!(
        key_of(&p("\"system:masters\"")),
        "principal[0].kube_groups[0]"
    );
    let e = parse(&p("\"dev\", \"system:masters\"")).unwrap_err();
    assert_eq!(e.key, "principal[0].kube_groups[1]");
    assert!(e.message.contains("system:"), "{}", e.message);
    // A group that would not travel unchanged in a header.
    assert_eq!(key_of(&p("\"a\\r\\nb\"")), "principal[0].kube_groups[0]");
    assert_eq!(key_of(&p("\"\"")), "principal[0].kube_groups[0]");

    // With impersonation on, every static name goes out as Impersonate-User.
    let on = |name: &str| {
        format!(
            "[cluster]\nmode = \"sim\"\nimpersonate = true\n[[principal]]\nname = \"{name}\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\n"
        )
    };
    assert!(parse(&on("ann@example.com")).unwrap().cluster.impersonate);
    assert_eq!(key_of(&on("system:admin")), "principal[0].name");
    assert_eq!(key_of(&on("ünïcode")), "principal[0].name");
    // Without it, the name is only kubegate's.
    assert!(parse(&with_principal(&format!(
        "name = \"ünïcode\"\ntoken_sha256 = \"{DEMO_DIGEST}\""
    )))
    .is_ok());
}
