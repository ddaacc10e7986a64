//! The `password` field of a creation or edit body (protocol 4.5): the
//! API's form of `links::unlock::NewPassword`.

use crate::error::ApiError;
use crate::links::unlock::{NewPassword, MAX_PASSWORD, MIN_PASSWORD};
use serde_json::{Map, Value};

/// The API field.
pub const FIELD: &str = "password";

/// The `password` field of a creation or edit body: absent (`None`),
/// `null` (`Some(None)`: remove it) or a password.
pub fn parse(obj: &Map<String, Value>) -> Result<Option<Option<NewPassword>>, ApiError> {
    let refused = || {
        ApiError::bad_request(
            "invalid_password",
            format!(
                "password must be {MIN_PASSWORD}-{MAX_PASSWORD} characters without control \
                 characters, or null"
            ),
        )
    };
    match obj.get(FIELD) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(s)) => NewPassword::new(s)
            .map(|p| Some(Some(p)))
            .ok_or_else(refused),
        Some(_) => Err(refused()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn passwords_are_checked_and_never_shown() {
        assert_eq!(parse(&obj(serde_json::json!({}))).unwrap(), None);
        assert_eq!(
            parse(&obj(serde_json::json!({"password": null}))).unwrap(),
            Some(None)
        );
        let p = parse(&obj(serde_json::json!({"password": "s3cret pw"}))).unwrap();
        assert!(matches!(p, Some(Some(_))));
        assert!(!format!("{p:?}").contains("s3cret"));
        for bad in [
            serde_json::json!("abc"),
            serde_json::json!("x".repeat(129)),
            serde_json::json!("line\nbreak"),
            serde_json::json!(1234),
            serde_json::json!(["a"]),
        ] {
            let e = parse(&obj(serde_json::json!({"password": bad}))).unwrap_err();
            assert_eq!(e.kind, "invalid_password");
        }
        // Four characters, not bytes.
        assert!(parse(&obj(serde_json::json!({"password": "密码密码"}))).is_ok());
    }
}
