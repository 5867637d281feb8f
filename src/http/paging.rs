//! Owns: how the management API answers a list — RabbitMQ's query parameters over any
//! JSON list: `columns=a,b.c` (dotted paths), `sort=field` (a dotted path, put before the
//! list's default sort keys) with `sort_reverse=true`, and `page`, `page_size`, `name`,
//! `use_regex`, answered with RabbitMQ's paged object (`filtered_count`, `item_count`,
//! `items`, `page`, `page_count`, `page_size`, `total_count`) and its 400s and reasons
//! for bad parameters ([`reply`]). Every list endpoint answers through it.
//!
//! The order of the steps is RabbitMQ's (`rabbit_mgmt_util`): columns, then sort, then
//! the name filter and the page. Sorting compares values in Erlang's term order (numbers
//! before atoms before objects before arrays before strings; a missing field is 0), as
//! RabbitMQ's `lists:sort` does over its facts. A list whose items are built here
//! ([`reply_built`]) has each item built first with only its sort keys, and whole only
//! if it is answered: a page of 50 of 10,000 queues, or a few columns of each, costs
//! what it shows, not the whole list's JSON.
//!
//! Does not: build the list (each area of the API does) or decide who may see an item.

use std::cmp::Ordering;

use bytes::Bytes;
use hyper::StatusCode;
use serde_json::{json, Map, Value};

use super::{respond, HttpResponse};

/// RabbitMQ's page size without `page_size`, and the largest it accepts.
const DEFAULT_PAGE_SIZE: i64 = 100;
const MAX_PAGE_SIZE: i64 = 500;
/// The longest `name` accepted as a regular expression.
const MAX_FILTER_LENGTH: usize = 1024;

/// The default sort of most lists (RabbitMQ's `reply_list`).
pub const BY_VHOST_AND_NAME: &[&str] = &["vhost", "name"];
/// The default sort of the bindings.
pub const BINDINGS: &[&str] = &[
    "vhost",
    "source",
    "type",
    "destination",
    "routing_key",
    "properties_key",
];

/// The list parameters of one request.
#[derive(Debug, Default, PartialEq)]
struct ListQuery {
    columns: Option<Vec<Vec<String>>>,
    sort: Option<String>,
    reverse: bool,
    page: Option<Page>,
}

#[derive(Debug, PartialEq)]
struct Page {
    page: i64,
    size: i64,
    name: Option<String>,
    regex: bool,
}

/// A bad parameter: RabbitMQ's error type and reason (400).
#[derive(Debug, PartialEq)]
struct Invalid {
    kind: &'static str,
    reason: String,
}

/// The query string's parameters, decoded (`+` is a space); the first of a repeated one.
fn params(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let decode = |s: &str| {
                let s = s.replace('+', " ");
                percent_encoding::percent_decode_str(&s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect()
}

fn parse(query: &str) -> Result<ListQuery, Invalid> {
    let params = params(query);
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let columns = get("columns").map(|c| {
        c.split(',')
            .filter(|c| !c.is_empty())
            .map(|c| {
                c.split('.')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .collect()
    });
    let sort = get("sort").filter(|s| !s.is_empty()).map(str::to_owned);
    let reverse = get("sort_reverse") == Some("true");
    let invalid = || Invalid {
        kind: "bad_request",
        reason: "Pagination parameters are invalid".to_owned(),
    };
    let integer = |name: &str| -> Result<Option<i64>, Invalid> {
        get(name)
            .map(|v| v.parse::<i64>().map_err(|_| invalid()))
            .transpose()
    };
    let page = integer("page")?;
    let size = integer("page_size")?;
    let regex = get("use_regex") == Some("true");
    let name = get("name").map(str::to_owned);
    if regex
        && name
            .as_ref()
            .is_some_and(|n| n.chars().count() > MAX_FILTER_LENGTH)
    {
        return Err(Invalid {
            kind: "invalid_pagination_parameters",
            reason: "name filter regex is too long".to_owned(),
        });
    }
    let page = match (page, size) {
        (None, _) => None,
        (Some(page), None) if page > 0 => Some(Page {
            page,
            size: DEFAULT_PAGE_SIZE,
            name,
            regex,
        }),
        (Some(page), Some(size)) if page > 0 && size > 0 && size <= MAX_PAGE_SIZE => Some(Page {
            page,
            size,
            name,
            regex,
        }),
        (Some(page), size) => {
            let size = size.map_or_else(|| "undefined".to_owned(), |s| s.to_string());
            return Err(Invalid {
                kind: "invalid_pagination_parameters",
                reason: format!(
                    "Invalid pagination parameters: page number {page}, page size {size}"
                ),
            });
        }
    };
    Ok(ListQuery {
        columns,
        sort,
        reverse,
        page,
    })
}

/// The top-level fields a list item must have where [`reply_built`] builds it; a builder
/// may leave out every other field, and the answer is the same as if it had built them
/// all.
pub struct Fields {
    only: Option<Vec<String>>,
    keys: bool,
}

impl Fields {
    /// Every field.
    pub const ALL: Fields = Fields {
        only: None,
        keys: false,
    };

    /// Whether the item needs `field`.
    pub fn wants(&self, field: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|f| f == field))
    }
}

/// A JSON object of the fields `fields` wants, each value evaluated only if its field is
/// wanted: `object!(fields, { "name": q.name, "messages": q.ready + q.unacked })`.
macro_rules! object {
    ($fields:expr, { $($key:literal : $value:expr),* $(,)? }) => {{
        let fields: &$crate::http::paging::Fields = $fields;
        let mut map = serde_json::Map::new();
        $(
            if fields.wants($key) {
                map.insert($key.to_owned(), serde_json::json!($value));
            }
        )*
        serde_json::Value::Object(map)
    }};
}
pub(crate) use object;

/// Answers a list as the query asks: all of it (sorted, with the columns asked for), or
/// the paged object. `default_sort` are the list's own sort keys.
pub fn reply(query: &str, items: Vec<Value>, default_sort: &[&str]) -> HttpResponse {
    answer(shape(query, items, default_sort))
}

/// [`reply`] for a list of `count` items that `build(i, fields)` makes: each item is
/// built once with only its sort keys (and its name, under a name filter), and only the
/// items answered are built whole (with only the columns asked for). So a page of 50 of
/// 10,000 queues costs 50 queues' JSON, not 10,000.
pub fn reply_built(
    query: &str,
    count: usize,
    default_sort: &[&str],
    build: impl FnMut(usize, &Fields) -> Value,
) -> HttpResponse {
    answer(shape_with(query, count, default_sort, build))
}

fn answer(shaped: Result<Value, Invalid>) -> HttpResponse {
    match shaped {
        Ok(v) => respond(
            StatusCode::OK,
            "application/json",
            Bytes::from(v.to_string()),
        ),
        Err(Invalid { kind, reason }) => respond(
            StatusCode::BAD_REQUEST,
            "application/json",
            Bytes::from(json!({ "error": kind, "reason": reason }).to_string()),
        ),
    }
}

/// [`shape_with`] over built items: the key pass copies the fields it needs, the answer
/// takes each item as it is.
fn shape(query: &str, items: Vec<Value>, default_sort: &[&str]) -> Result<Value, Invalid> {
    let count = items.len();
    let mut slots: Vec<Option<Value>> = items.into_iter().map(Some).collect();
    shape_with(query, count, default_sort, |i, fields| {
        let Some(slot) = slots.get_mut(i) else {
            return Value::Null;
        };
        if !fields.keys {
            return slot.take().unwrap_or(Value::Null);
        }
        match slot.as_ref() {
            Some(Value::Object(map)) => Value::Object(
                map.iter()
                    .filter(|(k, _)| fields.wants(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            other => other.cloned().unwrap_or(Value::Null),
        }
    })
}

/// The steps in RabbitMQ's order (`rabbit_mgmt_util`): columns, then sort, then the name
/// filter and the page — over items built as each step needs them.
fn shape_with(
    query: &str,
    count: usize,
    default_sort: &[&str],
    mut build: impl FnMut(usize, &Fields) -> Value,
) -> Result<Value, Invalid> {
    let q = parse(query)?;
    // The asked-for key first, then the defaults without it (RabbitMQ's merge_sorts).
    let mut keys: Vec<Vec<&str>> = Vec::new();
    for k in q
        .sort
        .iter()
        .map(String::as_str)
        .chain(default_sort.iter().copied())
    {
        let path: Vec<&str> = k.split('.').filter(|s| !s.is_empty()).collect();
        if !keys.contains(&path) {
            keys.push(path);
        }
    }
    let filter = q
        .page
        .as_ref()
        .map(|p| NameFilter::new(p.name.as_deref(), p.regex))
        .filter(|f| !matches!(f, NameFilter::All));
    let mut key_fields: Vec<String> = keys
        .iter()
        .filter_map(|k| k.first().map(|f| (*f).to_owned()))
        .collect();
    if filter.is_some() {
        key_fields.push("name".to_owned());
    }
    let key_fields = Fields {
        only: Some(key_fields),
        keys: true,
    };
    // The key pass: each item's sort values and whether the filter admits it, as they
    // are once the columns are applied (a column left out sorts as missing).
    let mut keyed: Vec<(Vec<Value>, usize, bool)> = (0..count)
        .map(|i| {
            let mut item = build(i, &key_fields);
            if let Some(columns) = &q.columns {
                keep_columns(&mut item, columns);
            }
            let values = keys.iter().map(|k| dotted(&item, k).clone()).collect();
            let admitted = filter.as_ref().is_none_or(|f| f.admits(&item));
            (values, i, admitted)
        })
        .collect();
    keyed.sort_by(|(a, _, _), (b, _, _)| {
        a.iter()
            .zip(b.iter())
            .map(|(x, y)| term_order(x, y))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    });
    if q.reverse {
        keyed.reverse();
    }
    let answer_fields = Fields {
        only: q
            .columns
            .as_ref()
            .map(|columns| columns.iter().filter_map(|c| c.first().cloned()).collect()),
        keys: false,
    };
    let mut whole = |i: usize| {
        let mut item = build(i, &answer_fields);
        if let Some(columns) = &q.columns {
            keep_columns(&mut item, columns);
        }
        item
    };
    let Some(page) = q.page else {
        return Ok(Value::Array(
            keyed.into_iter().map(|(_, i, _)| whole(i)).collect(),
        ));
    };
    let filtered: Vec<usize> = keyed
        .into_iter()
        .filter(|(_, _, admitted)| *admitted)
        .map(|(_, i, _)| i)
        .collect();
    let len = filtered.len() as i64;
    // lists:sublist/3 takes a start from 1 up to length + 1.
    let offset = (page.page - 1).saturating_mul(page.size);
    if offset > len {
        return Err(Invalid {
            kind: "page_out_of_range",
            reason: format!(
                "Page out of range, page: {} page size: {}, len: {len}",
                page.page, page.size
            ),
        });
    }
    let page_count = (len + page.size - 1) / page.size;
    let items: Vec<Value> = filtered
        .into_iter()
        .skip(offset as usize)
        .take(page.size as usize)
        .map(whole)
        .collect();
    Ok(json!({
        "total_count": count,
        "item_count": items.len(),
        "filtered_count": len,
        "page": page.page,
        "page_size": page.size,
        "page_count": page_count,
        "items": items,
    }))
}

/// The `name` filter: a case-insensitive substring, or a case-insensitive regular
/// expression (one that does not compile matches nothing, as in RabbitMQ).
enum NameFilter {
    All,
    Substring(String),
    Regex(Option<regex::Regex>),
}

impl NameFilter {
    fn new(name: Option<&str>, regex: bool) -> NameFilter {
        match name {
            None | Some("") => NameFilter::All,
            Some(n) if regex => NameFilter::Regex(
                regex::RegexBuilder::new(n)
                    .case_insensitive(true)
                    .size_limit(1 << 20)
                    .build()
                    .ok(),
            ),
            Some(n) => NameFilter::Substring(n.to_lowercase()),
        }
    }

    fn admits(&self, item: &Value) -> bool {
        let name = item.get("name").and_then(Value::as_str);
        match self {
            NameFilter::All => true,
            NameFilter::Substring(s) => name.is_some_and(|n| n.to_lowercase().contains(s)),
            NameFilter::Regex(r) => match (r, name) {
                (Some(r), Some(n)) => r.is_match(n),
                _ => false,
            },
        }
    }
}

/// Keeps only the asked-for columns of an object (and of the objects of an array),
/// descending into dotted ones (RabbitMQ's `extract_column_items`).
fn keep_columns(item: &mut Value, columns: &[Vec<String>]) {
    match item {
        Value::Object(map) => {
            let old = std::mem::take(map);
            let mut kept = Map::new();
            for (k, mut v) in old {
                let mut deeper: Vec<Vec<String>> = Vec::new();
                let mut whole = false;
                for c in columns.iter().filter(|c| c.first() == Some(&k)) {
                    if c.len() == 1 {
                        whole = true;
                    } else {
                        deeper.push(c[1..].to_vec());
                    }
                }
                if !whole && deeper.is_empty() {
                    continue;
                }
                // A column naming `k` itself keeps all of it.
                if !whole {
                    keep_columns(&mut v, &deeper);
                }
                kept.insert(k, v);
            }
            *map = kept;
        }
        Value::Array(list) => {
            for v in list {
                keep_columns(v, columns);
            }
        }
        _ => {}
    }
}

/// The value at a dotted path, or 0 where it is missing (RabbitMQ's get_dotted_value).
fn dotted<'a>(item: &'a Value, path: &[&str]) -> &'a Value {
    static ZERO: Value = Value::Null;
    let mut at = item;
    for key in path {
        match at.get(key) {
            Some(v) => at = v,
            None => return &ZERO,
        }
    }
    at
}

/// Erlang's term order over JSON: number < atom (true, false, null) < object < array <
/// string. A missing value (`dotted`'s `Null` stand-in) sorts as the number 0.
fn term_order(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null | Value::Number(_) => 0,
            Value::Bool(_) => 1,
            Value::Object(_) => 2,
            Value::Array(_) => 3,
            Value::String(_) => 4,
        }
    }
    fn number(v: &Value) -> f64 {
        v.as_f64().unwrap_or(0.0)
    }
    match rank(a).cmp(&rank(b)) {
        Ordering::Equal => {}
        other => return other,
    }
    match (a, b) {
        (Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        // Atoms compare by name: false < true.
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => x
            .iter()
            .zip(y.iter())
            .map(|(p, q)| term_order(p, q))
            .find(|o| o.is_ne())
            .unwrap_or_else(|| x.len().cmp(&y.len())),
        (Value::Object(x), Value::Object(y)) => x.len().cmp(&y.len()),
        _ => number(a).partial_cmp(&number(b)).unwrap_or(Ordering::Equal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &Value) -> Vec<&str> {
        let list = v.get("items").unwrap_or(v);
        list.as_array()
            .map(|a| a.iter().filter_map(|i| i["name"].as_str()).collect())
            .unwrap_or_default()
    }

    fn list() -> Vec<Value> {
        vec![
            json!({"name": "b", "vhost": "/", "n": 2, "s": {"x": 1}}),
            json!({"name": "a", "vhost": "/", "n": 3, "s": {"x": 3}}),
            json!({"name": "c", "vhost": "/", "s": {"x": 2}}),
        ]
    }

    #[test]
    fn sorts_by_default_keys_then_by_a_dotted_path_reversed() {
        let v = shape("", list(), BY_VHOST_AND_NAME).ok();
        assert_eq!(v.as_ref().map(names), Some(vec!["a", "b", "c"]));
        let v = shape("sort=s.x&sort_reverse=true", list(), BY_VHOST_AND_NAME).ok();
        assert_eq!(v.as_ref().map(names), Some(vec!["a", "c", "b"]));
        // A missing field sorts as 0: before every number.
        let v = shape("sort=n", list(), BY_VHOST_AND_NAME).ok();
        assert_eq!(v.as_ref().map(names), Some(vec!["c", "b", "a"]));
    }

    #[test]
    fn numbers_sort_before_strings() {
        let items = vec![json!({"name": "x", "k": "1"}), json!({"name": "y", "k": 5})];
        let v = shape("sort=k", items, &[]).ok();
        assert_eq!(v.as_ref().map(names), Some(vec!["y", "x"]));
    }

    #[test]
    fn columns_keep_dotted_paths() {
        let v = shape("columns=name,s.x", list(), BY_VHOST_AND_NAME).ok();
        assert_eq!(
            v.and_then(|v| v.get(0).cloned()),
            Some(json!({"name": "a", "s": {"x": 3}}))
        );
    }

    #[test]
    fn bad_parameters_have_rabbitmqs_reasons() {
        let reason = |q: &str| shape(q, list(), &[]).err().map(|e| e.reason);
        assert_eq!(
            reason("page=1&page_size=501").as_deref(),
            Some("Invalid pagination parameters: page number 1, page size 501")
        );
        assert_eq!(
            reason("page=0").as_deref(),
            Some("Invalid pagination parameters: page number 0, page size undefined")
        );
        assert_eq!(
            reason("page=x").as_deref(),
            Some("Pagination parameters are invalid")
        );
        assert_eq!(
            reason("page=3&page_size=1").as_deref(),
            None,
            "page 3 of 3 single items exists"
        );
        assert_eq!(
            reason("page=5&page_size=1").as_deref(),
            Some("Page out of range, page: 5 page size: 1, len: 3")
        );
    }

    /// [`shape_with`] over `list()` built field by field, counting whole builds.
    fn built(query: &str) -> (Result<Value, Invalid>, usize) {
        let items = list();
        let mut whole = 0;
        let shaped = shape_with(query, items.len(), BY_VHOST_AND_NAME, |i, fields| {
            if !fields.keys {
                whole += 1;
            }
            match &items[i] {
                Value::Object(map) => Value::Object(
                    map.iter()
                        .filter(|(k, _)| fields.wants(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ),
                other => other.clone(),
            }
        });
        (shaped, whole)
    }

    #[test]
    fn items_built_field_by_field_answer_as_built_items() {
        for query in [
            "",
            "sort=s.x&sort_reverse=true",
            "sort=n",
            "columns=name,s.x",
            "columns=s&sort=name",
            "columns=n&sort=n",
            "page=1&page_size=2&name=A",
            "page=2&page_size=1&sort=n&sort_reverse=true",
            "page=1&name=%5B%5Eb%5D&use_regex=true&columns=vhost",
            "page=5&page_size=1",
        ] {
            assert_eq!(
                built(query).0,
                shape(query, list(), BY_VHOST_AND_NAME),
                "{query}"
            );
        }
        // Only what is answered is built whole.
        assert_eq!(built("page=2&page_size=1").1, 1);
        assert_eq!(built("page=1&page_size=2&name=a").1, 1);
        assert_eq!(built("").1, 3);
    }

    #[test]
    fn name_filter_counts() {
        let v = shape("page=1&page_size=2&name=A", list(), BY_VHOST_AND_NAME).ok();
        let v = v.unwrap_or_default();
        assert_eq!(v["total_count"], 3);
        assert_eq!(v["filtered_count"], 1);
        assert_eq!(v["page_count"], 1);
        let v = shape(
            "page=1&name=%5B%5Eb%5D&use_regex=true",
            list(),
            BY_VHOST_AND_NAME,
        );
        assert_eq!(v.ok().as_ref().map(names), Some(vec!["a", "c"]));
    }
}
