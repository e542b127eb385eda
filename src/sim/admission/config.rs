//! ConfigMaps and Secrets: data keys, base64 `data` and `stringData`
//! (folded into `data` on write), Secret types, and `immutable`.

use super::{default_field, obj_field, str_at, Causes, Rejection};
use crate::sim::rules::check_config_key;
use crate::sim::store::{FieldCause, Obj};
use base64::Engine;
use serde_json::{json, Value};
use std::collections::HashSet;

pub(super) fn decode_error(res: &str, what: String) -> Rejection {
    Rejection::BadRequest(format!(
        "{res} in version \"v1\" cannot be handled as a {res}: {what}"
    ))
}

/// Key syntax of `data`/`binaryData`, values' JSON types, keys unique across
/// both maps; for secrets, `data` values must be base64.
pub(super) fn validate_config_data(
    obj: &Obj,
    secret: bool,
    causes: &mut Causes,
) -> Result<(), Rejection> {
    let kind = if secret { "Secret" } else { "ConfigMap" };
    let maps: &[&str] = if secret {
        &["data"]
    } else {
        &["data", "binaryData"]
    };
    let mut keys = HashSet::new();
    for field in maps {
        let Some(v) = obj.get(*field).filter(|v| !v.is_null()) else {
            continue;
        };
        let Some(m) = v.as_object() else {
            return Err(decode_error(kind, format!("{field} must be a map")));
        };
        for (k, v) in m {
            let Some(s) = v.as_str() else {
                return Err(decode_error(kind, format!("{field}[{k}] must be a string")));
            };
            if (secret || *field == "binaryData")
                && base64::engine::general_purpose::STANDARD.decode(s).is_err()
            {
                return Err(decode_error(
                    kind,
                    format!("illegal base64 data in {field}[{k}]"),
                ));
            }
            if let Err(e) = check_config_key(k) {
                causes.push(FieldCause::invalid(format!("{field}[{k}]"), k, e));
            } else if !keys.insert(k.clone()) {
                causes.push(FieldCause::duplicate(format!("{field}[{k}]"), k));
            }
        }
    }
    Ok(())
}

/// A `null` value in a map of strings decodes, in Go, to the empty string
/// (no error): `data`, `binaryData` and `stringData` keep `""` for it.
pub(super) fn null_strings_are_empty(obj: &mut Obj) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    for field in ["data", "binaryData", "stringData"] {
        if let Some(Value::Object(vals)) = m.get_mut(field) {
            for v in vals.values_mut() {
                if v.is_null() {
                    *v = Value::String(String::new());
                }
            }
        }
    }
}

/// `stringData` is write-only: merged into `data` as base64 (winning over
/// `data` on the same key), then dropped. `type` defaults to Opaque.
pub(super) fn secret_defaults(obj: &mut Obj) -> Result<(), Rejection> {
    let Some(m) = obj.as_object_mut() else {
        return Ok(());
    };
    default_field(m, "type", json!("Opaque"));
    let Some(sd) = m.remove("stringData") else {
        return Ok(());
    };
    if sd.is_null() {
        return Ok(());
    }
    let Some(sd) = sd.as_object() else {
        return Err(decode_error("Secret", "stringData must be a map".into()));
    };
    let data = obj_field(m, "data");
    for (k, v) in sd {
        let Some(s) = v.as_str() else {
            return Err(decode_error(
                "Secret",
                format!("stringData[{k}] must be a string"),
            ));
        };
        data.insert(
            k.clone(),
            json!(base64::engine::general_purpose::STANDARD.encode(s)),
        );
    }
    Ok(())
}

pub(super) fn validate_secret_type(obj: &Obj, causes: &mut Causes) {
    let data = obj.get("data").and_then(Value::as_object);
    let has = |k: &str| data.is_some_and(|d| d.contains_key(k));
    match str_at(obj, &["type"]) {
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    causes.push(FieldCause::required(format!("data[{k}]"), ""));
                }
            }
        }
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            causes.push(FieldCause::required("data[.dockerconfigjson]", ""));
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            causes.push(FieldCause::required("data[username]", ""));
        }
        _ => {}
    }
}

/// `immutable: true` freezes `data`/`binaryData` and itself.
pub(super) fn validate_immutable_data(new: &Obj, old: &Obj, causes: &mut Causes) {
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return;
    }
    if new.get("immutable").and_then(Value::as_bool) != Some(true) {
        causes.push(FieldCause::forbidden(
            "immutable",
            "field is immutable when `immutable` is set",
        ));
    }
    for f in ["data", "binaryData"] {
        if new.get(f) != old.get(f) {
            causes.push(FieldCause::forbidden(
                f,
                "field is immutable when `immutable` is set",
            ));
        }
    }
}
