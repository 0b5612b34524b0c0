//! The bodies the probe derives from the user's: the same JSON value spelled
//! differently (equivalent-body) and one field changed (mismatch).

use serde_json::Value;

/// The same JSON value with every object's members in reverse order and
/// whitespace around every token: other bytes, the same value. `None` when the
/// body is not JSON.
pub(crate) fn respelled(body: &[u8]) -> Option<Vec<u8>> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let mut out = String::from(" ");
    write_spaced(&value, &mut out);
    out.push(' ');
    Some(out.into_bytes())
}

fn write_spaced(value: &Value, out: &mut String) {
    match value {
        Value::Object(members) => {
            out.push_str("{ ");
            for (i, (name, member)) in members.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(" , ");
                }
                out.push_str(&Value::String(name.clone()).to_string());
                out.push_str(" : ");
                write_spaced(member, out);
            }
            out.push_str(" }");
        }
        Value::Array(items) => {
            out.push_str("[ ");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(" , ");
                }
                write_spaced(item, out);
            }
            out.push_str(" ]");
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The JSON Pointer of the first string or number member (depth first, members
/// in key order): what `--vary` defaults to.
pub(crate) fn default_vary_pointer(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    first_scalar(&value, String::new())
}

fn first_scalar(value: &Value, at: String) -> Option<String> {
    match value {
        Value::Object(members) => members.iter().find_map(|(name, member)| {
            let here = format!("{at}/{}", name.replace('~', "~0").replace('/', "~1"));
            match member {
                Value::String(_) | Value::Number(_) => Some(here),
                nested => first_scalar(nested, here),
            }
        }),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| first_scalar(item, format!("{at}/{i}"))),
        _ => None,
    }
}

/// The body with the value at `pointer` changed: a string gets a suffix, a
/// number grows by one, a boolean flips, anything else becomes a string.
pub(crate) fn varied(body: &[u8], pointer: &str) -> Result<Vec<u8>, String> {
    let mut value: Value =
        serde_json::from_slice(body).map_err(|e| format!("--vary needs a JSON body: {e}"))?;
    let target = value
        .pointer_mut(pointer)
        .ok_or_else(|| format!("--vary {pointer}: the body has no such field"))?;
    *target = match target.take() {
        Value::String(s) => Value::String(format!("{s}-idemkit-probe")),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Value::from(u.checked_add(1).unwrap_or(u - 1)),
            (_, Some(i), _) => Value::from(i + 1),
            (_, _, Some(f)) => Value::from(if f == 0.0 { 1.0 } else { f * 2.0 }),
            _ => Value::from(1),
        },
        Value::Bool(b) => Value::Bool(!b),
        _ => Value::String("idemkit-probe".to_owned()),
    };
    serde_json::to_vec(&value).map_err(|e| format!("--vary {pointer}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn respelled_is_other_bytes_and_the_same_value() {
        for body in [
            &br#"{"customer_id":"c-1","slot_id":"s-9"}"#[..],
            br#"{"a":[1,{"z":true,"y":null}],"b":"\u00e9"}"#,
            b"[1,2]",
            b"7",
        ] {
            let other = respelled(body).unwrap();
            assert_ne!(other, body);
            assert_eq!(parse(&other), parse(body));
        }
        let text = String::from_utf8(respelled(br#"{"a":1,"b":2}"#).unwrap()).unwrap();
        assert_eq!(text, r#" { "b" : 2 , "a" : 1 } "#);
        assert_eq!(respelled(b"a=1&b=2"), None);
    }

    #[test]
    fn the_default_pointer_is_the_first_string_or_number_member() {
        let body = br#"{"customer_id":"c-1","slot_id":"s-9"}"#;
        assert_eq!(default_vary_pointer(body).as_deref(), Some("/customer_id"));
        let nested = br#"{"a":{"flag":true,"items":[{"sku":"x"}]},"b":1}"#;
        assert_eq!(
            default_vary_pointer(nested).as_deref(),
            Some("/a/items/0/sku")
        );
        assert_eq!(
            default_vary_pointer(br#"{"a/b~":3}"#).as_deref(),
            Some("/a~1b~0")
        );
        assert_eq!(default_vary_pointer(br#"{"a":true}"#), None);
        assert_eq!(default_vary_pointer(b"not json"), None);
    }

    #[test]
    fn varied_changes_exactly_that_field() {
        let body = br#"{"amount":10,"note":"hi","ok":true,"f":1.5}"#;
        for (pointer, want) in [
            ("/amount", serde_json::json!(11)),
            ("/note", serde_json::json!("hi-idemkit-probe")),
            ("/ok", serde_json::json!(false)),
            ("/f", serde_json::json!(3.0)),
        ] {
            let changed = parse(&varied(body, pointer).unwrap());
            assert_eq!(changed.pointer(pointer), Some(&want), "{pointer}");
            let mut rest = changed.clone();
            *rest.pointer_mut(pointer).unwrap() = parse(body).pointer(pointer).unwrap().clone();
            assert_eq!(rest, parse(body), "only {pointer} changed");
        }
        let err = varied(body, "/missing").unwrap_err();
        assert!(err.contains("/missing"), "{err}");
        assert!(varied(b"x=1", "/x").is_err());
    }
}
