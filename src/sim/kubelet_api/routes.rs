//! The kubelet API's routes, sans-IO: a request's method and path (as
//! `http::parse` decoded it, and as it came) to a [`Route`]. The paths
//! the API server builds (`pkg/registry/core/pod/strategy.go`):
//! `/containerLogs/NS/POD/CONTAINER`, `/exec/NS/POD/CONTAINER`,
//! `/attach/NS/POD/CONTAINER`, `/portForward/NS/POD`; the kubelet also
//! takes a pod uid before the container (exec, attach) or after the pod
//! (portForward), which it does not check when the name is given. A
//! segment that is empty, `.` or `..`, or an encoded `/` in the path, is
//! no route.

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Healthz,
    Logs {
        ns: String,
        pod: String,
        container: String,
    },
    Exec {
        ns: String,
        pod: String,
        container: String,
    },
    Attach {
        ns: String,
        pod: String,
        container: String,
    },
    PortForward {
        ns: String,
        pod: String,
    },
    MethodNotAllowed,
    NotFound,
}

/// The route of `method` on `path` (decoded); `raw_path` is the path as
/// sent, checked for an encoded slash.
pub fn route(method: &str, raw_path: &str, path: &str) -> Route {
    let lower = raw_path.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") {
        return Route::NotFound;
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Route::NotFound;
    };
    let segs: Vec<&str> = rest.split('/').collect();
    if segs.iter().any(|s| s.is_empty() || *s == "." || *s == "..") {
        return Route::NotFound;
    }
    let get = method == "GET";
    let get_or_post = get || method == "POST";
    let owned = |s: &str| s.to_string();
    let (route, allowed) = match segs.as_slice() {
        ["healthz"] => (Route::Healthz, get || method == "HEAD"),
        ["containerLogs", ns, pod, c] => (
            Route::Logs {
                ns: owned(ns),
                pod: owned(pod),
                container: owned(c),
            },
            get,
        ),
        ["exec", ns, pod, c] | ["exec", ns, pod, _, c] => (
            Route::Exec {
                ns: owned(ns),
                pod: owned(pod),
                container: owned(c),
            },
            get_or_post,
        ),
        ["attach", ns, pod, c] | ["attach", ns, pod, _, c] => (
            Route::Attach {
                ns: owned(ns),
                pod: owned(pod),
                container: owned(c),
            },
            get_or_post,
        ),
        ["portForward", ns, pod] | ["portForward", ns, pod, _] => (
            Route::PortForward {
                ns: owned(ns),
                pod: owned(pod),
            },
            get_or_post,
        ),
        _ => return Route::NotFound,
    };
    if allowed {
        route
    } else {
        Route::MethodNotAllowed
    }
}

/// The `Allow` header of a path answered 405.
pub fn allowed(path: &str) -> &'static str {
    if path.starts_with("/containerLogs/") {
        "GET"
    } else if path == "/healthz" {
        "GET, HEAD"
    } else {
        "GET, POST"
    }
}

/// `Connection` names `upgrade` and `Upgrade` names `spdy/3.1` (spdy's
/// `UpgradeResponse`: substrings, case-insensitive).
pub fn is_spdy_upgrade(headers: &[(String, String)]) -> bool {
    let has = |name: &str, token: &str| {
        headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case(name) && v.to_ascii_lowercase().contains(token))
    };
    has("connection", "upgrade") && has("upgrade", "spdy/3.1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: &str, path: &str) -> Route {
        route(method, path, path)
    }

    #[test]
    fn routes_the_api_servers_paths() {
        assert_eq!(r("GET", "/healthz"), Route::Healthz);
        assert_eq!(
            r("POST", "/exec/default/web/main"),
            Route::Exec {
                ns: "default".into(),
                pod: "web".into(),
                container: "main".into()
            }
        );
        assert_eq!(
            r("GET", "/attach/ns/p/uid-1/c"),
            Route::Attach {
                ns: "ns".into(),
                pod: "p".into(),
                container: "c".into()
            }
        );
        assert_eq!(
            r("GET", "/containerLogs/ns/p/c"),
            Route::Logs {
                ns: "ns".into(),
                pod: "p".into(),
                container: "c".into()
            }
        );
        assert_eq!(
            r("POST", "/portForward/ns/p"),
            Route::PortForward {
                ns: "ns".into(),
                pod: "p".into()
            }
        );
        assert_eq!(r("POST", "/containerLogs/ns/p/c"), Route::MethodNotAllowed);
        assert_eq!(r("DELETE", "/exec/ns/p/c"), Route::MethodNotAllowed);
    }

    #[test]
    fn refuses_odd_paths() {
        for p in [
            "/",
            "",
            "healthz",
            "/healthz/",
            "/exec/ns/p",
            "/exec/ns/../c",
            "/exec/ns/./p/c",
            "/exec//p/c",
            "/exec/ns/p/c/",
            "/exec/ns/p/u/v/c",
            "/portforward/ns/p",
            "/pods",
            "/run/ns/p/c",
        ] {
            assert_eq!(r("GET", p), Route::NotFound, "{p:?}");
        }
        // An encoded slash or backslash never splits into a route.
        assert_eq!(
            route("GET", "/exec/ns/p%2Fx/c", "/exec/ns/p/x/c"),
            Route::NotFound
        );
        assert_eq!(
            route("GET", "/exec/ns/p%5cx/c", "/exec/ns/p\\x/c"),
            Route::NotFound
        );
    }

    #[test]
    fn spdy_upgrade_headers() {
        let h = |c: &str, u: &str| {
            vec![
                ("Connection".to_string(), c.to_string()),
                ("Upgrade".to_string(), u.to_string()),
            ]
        };
        assert!(is_spdy_upgrade(&h("Upgrade", "SPDY/3.1")));
        assert!(is_spdy_upgrade(&h("keep-alive, upgrade", "spdy/3.1")));
        assert!(!is_spdy_upgrade(&h("close", "SPDY/3.1")));
        assert!(!is_spdy_upgrade(&h("Upgrade", "websocket")));
    }
}
