//! Paging, columns and sorting of the lists as RabbitMQ's management answers them
//! (rabbit_mgmt_util: pagination, columns, sort), and plain arrays without parameters.

use serde_json::{json, Value};

use super::common::{bounded, Broker};
use super::{api, api_json};

/// `pq-00` .. `pq-24`, queue `i` with `i % 5` messages published to it.
async fn queues(broker: &Broker) -> super::common::Conn {
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    for i in 0..25u32 {
        let name = format!("pq-{i:02}");
        ch.declare_queue(&name).await;
        for _ in 0..i % 5 {
            ch.publish("", &name, b"m").await;
        }
    }
    for i in 0..25u32 {
        ch.wait_message_count(&format!("pq-{i:02}"), i % 5).await;
    }
    conn
}

fn names(v: &Value) -> Vec<String> {
    let list = v.get("items").unwrap_or(v);
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|q| q["name"].as_str().unwrap_or("?").to_owned())
        .collect()
}

fn expected(range: impl Iterator<Item = u32>) -> Vec<String> {
    range.map(|i| format!("pq-{i:02}")).collect()
}

async fn refused(port: u16, path: &str, error: &str, reason: &str) {
    let r = api(port, path).await;
    assert_eq!(r.status, 400, "GET {path}: {}", r.body);
    assert_eq!(
        r.json(),
        json!({"error": error, "reason": reason}),
        "GET {path}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_filters_columns_and_sorts() {
    let broker = Broker::start(2);
    bounded(async {
        let port = broker.http_port();
        let conn = queues(&broker).await;

        // No parameters: plain arrays, as rabbitmqadmin reads them.
        let all = api_json(port, "/api/queues").await;
        assert_eq!(names(&all), expected(0..25));
        for path in [
            "/api/queues/%2F",
            "/api/exchanges",
            "/api/exchanges/%2F",
            "/api/connections",
            "/api/channels",
            "/api/consumers",
        ] {
            assert!(api_json(port, path).await.is_array(), "{path}");
        }

        let page = api_json(port, "/api/queues?page=3&page_size=10").await;
        assert_eq!(names(&page), expected(20..25));
        for (field, want) in [
            ("page", 3),
            ("page_size", 10),
            ("page_count", 3),
            ("total_count", 25),
            ("filtered_count", 25),
            ("item_count", 5),
        ] {
            assert_eq!(page[field], want, "{field}: {page}");
        }
        let first = api_json(port, "/api/queues/%2F?page=1&page_size=10").await;
        assert_eq!(names(&first), expected(0..10));
        // The default page size is 100.
        let one = api_json(port, "/api/queues?page=1").await;
        assert_eq!(
            (one["page_size"].clone(), one["item_count"].clone()),
            (json!(100), json!(25))
        );

        // The name filter: a substring, or a regular expression with use_regex=true.
        let sub = api_json(port, "/api/queues?page=1&page_size=100&name=pq-1").await;
        assert_eq!(names(&sub), expected(10..20));
        assert_eq!(
            (sub["filtered_count"].clone(), sub["total_count"].clone()),
            (json!(10), json!(25))
        );
        assert_eq!(sub["page_count"], 1);
        let re = "/api/queues?page=1&page_size=100&use_regex=true&name=%5Epq-2%5B0-2%5D%24";
        let re = api_json(port, re).await;
        assert_eq!(names(&re), expected(20..23), "{re}");
        let plain = "/api/queues?page=1&page_size=100&name=%5Epq-2";
        assert_eq!(names(&api_json(port, plain).await), Vec::<String>::new());

        // RabbitMQ's 400s.
        refused(
            port,
            "/api/queues?page=4&page_size=10",
            "page_out_of_range",
            "Page out of range, page: 4 page size: 10, len: 25",
        )
        .await;
        refused(
            port,
            "/api/queues?page=0",
            "invalid_pagination_parameters",
            "Invalid pagination parameters: page number 0, page size undefined",
        )
        .await;
        refused(
            port,
            "/api/queues?page=1&page_size=501",
            "invalid_pagination_parameters",
            "Invalid pagination parameters: page number 1, page size 501",
        )
        .await;
        refused(
            port,
            "/api/queues?page=x",
            "bad_request",
            "Pagination parameters are invalid",
        )
        .await;

        // Columns: only the keys asked for, nested ones kept in their object.
        let cols = api_json(port, "/api/queues?columns=name,messages").await;
        for q in cols.as_array().expect("a list") {
            let keys: Vec<&String> = q.as_object().expect("an object").keys().collect();
            assert_eq!(keys.len(), 2, "{q}");
            assert!(q["name"].is_string() && q["messages"].is_u64(), "{q}");
        }
        let nested = api_json(port, "/api/queues?columns=name,message_stats.publish").await;
        let q7 = nested
            .as_array()
            .expect("a list")
            .iter()
            .find(|q| q["name"] == "pq-07")
            .cloned()
            .expect("pq-07");
        assert_eq!(
            q7,
            json!({"name": "pq-07", "message_stats": {"publish": 2}})
        );
        let paged_cols = api_json(port, "/api/queues?page=2&page_size=10&columns=name").await;
        assert_eq!(
            paged_cols["items"][0],
            json!({"name": "pq-10"}),
            "{paged_cols}"
        );

        // Sorting: by name reversed; by a nested column (then vhost and name).
        let rev = api_json(port, "/api/queues?sort=name&sort_reverse=true").await;
        assert_eq!(names(&rev), expected((0..25).rev()));
        let by_publish = api_json(port, "/api/queues?sort=message_stats.publish").await;
        let mut want: Vec<u32> = (0..25).collect();
        want.sort_by_key(|i| (i % 5, *i));
        assert_eq!(names(&by_publish), expected(want.iter().copied()));
        let top = "/api/queues?sort=message_stats.publish&sort_reverse=true&page=1&page_size=5";
        let top = api_json(port, top).await;
        assert_eq!(
            names(&top),
            expected([24, 19, 14, 9, 4].into_iter()),
            "{top}"
        );
        // The bindings (each queue's to the default exchange) sort and take columns too.
        let b = "/api/bindings/%2F?columns=destination&sort=destination&sort_reverse=true";
        let b = api_json(port, b).await;
        assert_eq!(b[0], json!({"destination": "pq-24"}), "{b}");
        assert_eq!(b.as_array().map(Vec::len), Some(25), "{b}");
        conn.close().await;
    })
    .await;
}
