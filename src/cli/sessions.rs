//! `kubegate sessions [list|stop ID|resume ID]`: `GET /v1/sessions` as a
//! table (or the JSON as it came), `DELETE /v1/sessions/{id}`, `POST
//! /v1/sessions/{id}/resume`. The daemon's error codes come through as they
//! are (`NOT_FOUND` for an unknown or another principal's session,
//! `NOT_SUSPENDED` for a resume of a running one).

use super::args::{OutputFormat, SessionsArgs, SessionsOp};
use super::net::Client;
use super::CliError;
use crate::exit::codes;
use serde_json::Value;
use std::io::Write;

pub fn run(a: &SessionsArgs) -> Result<(), CliError> {
    let client = Client::new(&a.common)?;
    let text = match &a.op {
        SessionsOp::List => {
            let body = client.get("/v1/sessions")?;
            let v: Value = serde_json::from_slice(&body).map_err(|e| {
                CliError::new(
                    codes::PROTOCOL,
                    format!("the daemon's session list does not decode: {e}"),
                )
            })?;
            let list = v["sessions"].as_array().ok_or_else(|| {
                CliError::new(codes::PROTOCOL, "the daemon's answer has no session list")
            })?;
            match a.output {
                OutputFormat::Json => {
                    let mut s = String::from_utf8_lossy(&body).trim_end().to_string();
                    s.push('\n');
                    s
                }
                OutputFormat::Table => table(list),
            }
        }
        SessionsOp::Stop(id) => {
            client.call("DELETE", &format!("/v1/sessions/{id}"), None)?;
            format!("session {id} stopping (its pod is deleted; it cannot be resumed)\n")
        }
        SessionsOp::Resume(id) => {
            client.call("POST", &format!("/v1/sessions/{id}/resume"), Some(b"{}"))?;
            format!(
                "session {id} resuming (a new pod with its files; `kubegate sessions` shows when it is running)\n"
            )
        }
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::new(codes::LOCAL_IO, format!("writing stdout: {e}")))
}

/// One row per session: ID, STATUS, APPS (comma-separated names), CREATED
/// (as the daemon gives it, RFC 3339 UTC), ENDPOINTS (each endpoint's URL,
/// or `app:port` when it has none; `-` for none; with gateway routing its
/// routing state after it: `(programmed)`, `(pending)`,
/// `(unprogrammed:REASON)`, docs/sessions.md#routing-states). A failed
/// session's status shows its stage: `failed(schedule)`.
pub fn table(list: &[Value]) -> String {
    let dash = |s: String| if s.is_empty() { "-".to_string() } else { s };
    let mut rows: Vec<Vec<String>> = vec![["ID", "STATUS", "APPS", "CREATED", "ENDPOINTS"]
        .iter()
        .map(|s| s.to_string())
        .collect()];
    for s in list {
        let text = |v: &Value| v.as_str().unwrap_or("").to_string();
        let mut status = text(&s["status"]);
        if let Some(stage) = s["error"]["stage"].as_str() {
            status = format!("{status}({stage})");
        }
        let apps: Vec<String> = s["apps"]
            .as_array()
            .map(|a| a.iter().map(|x| text(&x["name"])).collect())
            .unwrap_or_default();
        let endpoints: Vec<String> = s["endpoints"]
            .as_array()
            .map(|eps| {
                eps.iter()
                    .map(|e| {
                        let at = match e["url"].as_str() {
                            Some(u) if !u.is_empty() => u.to_string(),
                            _ => format!("{}:{}", text(&e["app"]), e["port"]),
                        };
                        match (
                            e["routing"]["state"].as_str(),
                            e["routing"]["reason"].as_str(),
                        ) {
                            (Some("unprogrammed"), Some(r)) if !r.is_empty() => {
                                format!("{at}(unprogrammed:{r})")
                            }
                            (Some(state), _) => format!("{at}({state})"),
                            (None, _) => at,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        rows.push(vec![
            dash(text(&s["sessionId"])),
            dash(status),
            dash(apps.join(",")),
            dash(text(&s["createdAt"])),
            dash(endpoints.join(",")),
        ]);
    }
    let mut widths = [0usize; 5];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < r.len() {
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_of_sessions() {
        let v: Value = serde_json::from_str(
            r#"{"sessions":[
              {"sessionId":"abc","status":"running","apps":[{"name":"web"},{"name":"worker"}],
               "endpoints":[{"app":"web","port":8080,"protocol":"tcp","host":"h","url":"http://web.example"}],
               "createdAt":"2024-01-02T03:04:05Z"},
              {"sessionId":"def","status":"failed","error":{"stage":"schedule","message":"m"},
               "apps":[{"name":"a"}],"endpoints":[{"app":"a","port":9000}],"createdAt":"2024-01-02T03:04:06Z"},
              {"sessionId":"ghi","status":"suspended","apps":[],"endpoints":[],"createdAt":"x"}]}"#,
        )
        .unwrap();
        let t = table(v["sessions"].as_array().unwrap());
        assert_eq!(
            t,
            "ID   STATUS            APPS        CREATED               ENDPOINTS\n\
             abc  running           web,worker  2024-01-02T03:04:05Z  http://web.example\n\
             def  failed(schedule)  a           2024-01-02T03:04:06Z  a:9000\n\
             ghi  suspended         -           x                     -\n"
        );
        assert_eq!(table(&[]), "ID  STATUS  APPS  CREATED  ENDPOINTS\n");
        // Gateway routing: each endpoint's routing state.
        let v: Value = serde_json::from_str(
            r#"[{"sessionId":"g","status":"running","apps":[{"name":"web"}],"createdAt":"c",
                 "endpoints":[
                   {"app":"web","port":80,"url":"https://80-g.d","routing":{"state":"programmed"}},
                   {"app":"web","port":81,"url":"https://81-g.d","routing":{"state":"unprogrammed",
                    "condition":"Accepted","reason":"NoMatchingParent","message":"m"}},
                   {"app":"web","port":82,"url":"https://82-g.d","routing":{"state":"pending"}}]}]"#,
        )
        .unwrap();
        assert!(table(v.as_array().unwrap()).ends_with(
            "https://80-g.d(programmed),https://81-g.d(unprogrammed:NoMatchingParent),https://82-g.d(pending)\n"
        ));
    }
}
