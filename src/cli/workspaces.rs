//! `kubegate workspaces`: `GET /v1/workspaces` and a table, one row per
//! Deployment (`-` for a workspace without one), or the JSON as it came.

use super::args::{OutputFormat, WorkspacesArgs};
use super::net::Client;
use super::CliError;
use crate::exit::codes;
use serde::Deserialize;
use std::io::Write;

#[derive(Debug, Deserialize)]
pub struct List {
    pub workspaces: Vec<Workspace>,
}

#[derive(Debug, Deserialize)]
pub struct Workspace {
    pub project: String,
    pub uid: String,
    #[serde(default)]
    pub deployments: Vec<Deployment>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deployment {
    pub name: String,
    #[serde(default)]
    pub containers: Vec<String>,
    #[serde(default)]
    pub replicas: i64,
    #[serde(default)]
    pub ready_replicas: i64,
}

pub fn run(a: &WorkspacesArgs) -> Result<(), CliError> {
    let client = Client::new(&a.common)?;
    let body = client.get("/v1/workspaces")?;
    // Checked in both formats: a body that is not the listing is an error,
    // not something to print.
    let list: List = serde_json::from_slice(&body).map_err(|e| {
        CliError::new(
            codes::PROTOCOL,
            format!("the daemon's workspace list does not decode: {e}"),
        )
    })?;
    let text = match a.output {
        OutputFormat::Json => {
            let mut s = String::from_utf8_lossy(&body).trim_end().to_string();
            s.push('\n');
            s
        }
        OutputFormat::Table => table(&list),
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::new(codes::LOCAL_IO, format!("writing stdout: {e}")))
}

/// The table, columns padded to their widest cell, two spaces apart.
pub fn table(list: &List) -> String {
    let mut rows: Vec<[String; 4]> = vec![[
        "WORKSPACE".into(),
        "DEPLOYMENT".into(),
        "CONTAINERS".into(),
        "READY".into(),
    ]];
    for w in &list.workspaces {
        let ws = format!("{}/{}", w.project, w.uid);
        if w.deployments.is_empty() {
            rows.push([ws.clone(), "-".into(), "-".into(), "-".into()]);
        }
        for d in &w.deployments {
            let containers = if d.containers.is_empty() {
                "-".to_string()
            } else {
                d.containers.join(",")
            };
            rows.push([
                ws.clone(),
                d.name.clone(),
                containers,
                format!("{}/{}", d.ready_replicas, d.replicas),
            ]);
        }
    }
    let mut widths = [0usize; 4];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut s = String::new();
    for r in &rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_per_deployment_and_a_dash_for_none() {
        let list: List = serde_json::from_str(
            r#"{"workspaces":[
                {"project":"demo","uid":"demo-uid","deployments":[
                    {"name":"hello","containers":["main"],"replicas":1,"readyReplicas":1},
                    {"name":"api","containers":["app","sidecar"],"replicas":3,"readyReplicas":2}]},
                {"project":"empty","uid":"u1","deployments":[]},
                {"project":"old","uid":"u2"}]}"#,
        )
        .unwrap();
        assert_eq!(
            table(&list),
            "WORKSPACE      DEPLOYMENT  CONTAINERS   READY\n\
             demo/demo-uid  hello       main         1/1\n\
             demo/demo-uid  api         app,sidecar  2/3\n\
             empty/u1       -           -            -\n\
             old/u2         -           -            -\n"
        );
    }

    #[test]
    fn missing_counts_read_as_zero() {
        let list: List = serde_json::from_str(
            r#"{"workspaces":[{"project":"p","uid":"u","deployments":[{"name":"d"}]}]}"#,
        )
        .unwrap();
        assert!(table(&list).ends_with("p/u        d           -           0/0\n"));
    }

    #[test]
    fn an_empty_list_is_just_the_header() {
        let list: List = serde_json::from_str(r#"{"workspaces":[]}"#).unwrap();
        assert_eq!(table(&list), "WORKSPACE  DEPLOYMENT  CONTAINERS  READY\n");
    }
}
