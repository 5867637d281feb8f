//! Owns: sluicectl's command line (clap): the global flags, valid anywhere on the line,
//! and the subcommands with their arguments.

use clap::{Parser, Subcommand, ValueEnum};

/// sluicectl — list and administer a sluice broker through its management API.
#[derive(Parser, Debug)]
#[command(
    name = "sluicectl",
    version,
    about = "sluice's management tool: lists and administers queues, exchanges, bindings, users, vhosts, permissions, limits and policies, exports and imports definitions, publishes and gets messages, and runs health checks over the management API"
)]
pub struct Args {
    /// The management listener: http://HOST:PORT, https://HOST:PORT or HOST:PORT (http).
    #[arg(
        long,
        global = true,
        default_value = "127.0.0.1:15672",
        value_name = "URL"
    )]
    pub server: String,
    /// User name (basic auth).
    #[arg(long, short = 'u', global = true, default_value = "guest")]
    pub user: String,
    /// Password (basic auth). Else --password-file, else $SLUICE_PASSWORD, else "guest".
    #[arg(long, short = 'p', global = true)]
    pub password: Option<String>,
    /// A file holding the password (its first line).
    #[arg(long, global = true, value_name = "FILE")]
    pub password_file: Option<String>,
    /// A PEM file of CA certificates to trust for https (default: the webpki roots).
    #[arg(long, global = true, value_name = "FILE")]
    pub cacert: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// The vhost: a filter for the lists, the vhost of the object commands (default /).
    #[arg(long, global = true)]
    pub vhost: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestinationType {
    Queue,
    Exchange,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitScope {
    Vhost,
    User,
}

#[derive(clap::Args, Debug)]
pub struct Binding {
    #[arg(long)]
    pub source: String,
    #[arg(long)]
    pub destination: String,
    #[arg(long, value_enum, default_value = "queue")]
    pub destination_type: DestinationType,
    #[arg(long, default_value = "")]
    pub routing_key: String,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Broker totals.
    Overview,
    /// Queues: depth, consumers, flow state, slow-consumer prediction.
    Queues,
    Connections,
    Channels,
    Consumers,
    Exchanges,
    Bindings,
    /// Federation links: upstream, status, URI, messages forwarded and dropped, lag,
    /// last change, and why a link is down (--vhost: only that vhost's).
    Federation,
    /// Close a connection (320 CONNECTION_FORCED); NAME as listed by `connections`.
    CloseConnection {
        name: String,
    },
    /// Purge a queue.
    Purge {
        queue: String,
    },
    /// Queues refreshed every interval, like `top`, under a line of broker totals:
    /// soonest predicted slow-consumer breach first, then the largest.
    Top {
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long)]
        iterations: Option<u64>,
        /// Rows shown.
        #[arg(long, default_value_t = 40)]
        rows: usize,
    },
    /// Declare a queue.
    DeclareQueue {
        name: String,
        #[arg(long)]
        durable: bool,
        #[arg(long)]
        auto_delete: bool,
        /// A queue argument, KEY=VALUE (VALUE as JSON if it parses, else a string).
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        args: Vec<String>,
    },
    /// Delete a queue.
    DeleteQueue {
        queue: String,
    },
    /// Declare an exchange.
    DeclareExchange {
        name: String,
        #[arg(long = "type", value_name = "TYPE")]
        kind: String,
        #[arg(long)]
        durable: bool,
    },
    /// Delete an exchange.
    DeleteExchange {
        name: String,
    },
    /// Bind a queue or an exchange to an exchange.
    Bind(Binding),
    /// Remove a binding (found among the bindings by its routing key).
    Unbind(Binding),
    /// Users and their tags.
    Users,
    /// Create or change a user (as rabbitmqctl add_user NAME PASSWORD).
    AddUser {
        name: String,
        /// The new user's password (positional: --password is the caller's own).
        #[arg(value_name = "PASSWORD")]
        new_password: String,
        /// Comma-separated tags (administrator, management, ...).
        #[arg(long, default_value = "")]
        tags: String,
    },
    DeleteUser {
        name: String,
    },
    Vhosts,
    AddVhost {
        name: String,
    },
    DeleteVhost {
        name: String,
    },
    /// Permissions (--vhost: only that vhost's).
    Permissions,
    /// Set a user's permissions in --vhost (default /).
    SetPermissions {
        /// The user (positional: --user is the caller's own).
        #[arg(value_name = "USER")]
        target: String,
        #[arg(long, default_value = ".*")]
        configure: String,
        #[arg(long, default_value = ".*")]
        write: String,
        #[arg(long, default_value = ".*")]
        read: String,
    },
    /// Remove a user's permissions in --vhost (default /).
    ClearPermissions {
        /// The user (positional: --user is the caller's own).
        #[arg(value_name = "USER")]
        target: String,
    },
    /// Set a vhost or user limit (max-connections, max-queues, max-channels).
    SetLimit {
        scope: LimitScope,
        name: String,
        limit: String,
        value: i64,
    },
    ClearLimit {
        scope: LimitScope,
        name: String,
        limit: String,
    },
    /// Policies (--vhost: only that vhost's).
    Policies,
    /// Set a policy in --vhost (default /), as rabbitmqctl set_policy NAME PATTERN
    /// DEFINITION: DEFINITION is a JSON object of policy keys (max-length, overflow,
    /// message-ttl, sluice-capacity, ...).
    SetPolicy {
        name: String,
        pattern: String,
        definition: String,
        /// queues, exchanges or all.
        #[arg(long, default_value = "all")]
        apply_to: String,
        #[arg(long, default_value_t = 0)]
        priority: i64,
    },
    /// Remove a policy from --vhost (default /).
    ClearPolicy {
        name: String,
    },
    /// Write the definitions to FILE (- for stdout).
    Export {
        file: String,
    },
    /// Load definitions from FILE (- for stdin).
    Import {
        file: String,
    },
    /// Publish a message through an exchange; prints whether it was routed.
    Publish {
        #[arg(long, default_value = "")]
        exchange: String,
        #[arg(long, default_value = "")]
        routing_key: String,
        #[arg(
            long,
            conflicts_with = "payload_file",
            required_unless_present = "payload_file"
        )]
        payload: Option<String>,
        #[arg(long, value_name = "FILE")]
        payload_file: Option<String>,
        /// Exit 1 when the message was not routed.
        #[arg(long)]
        mandatory: bool,
    },
    /// Get messages from a queue.
    Get {
        queue: String,
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// ack_requeue_true, ack_requeue_false, reject_requeue_true, reject_requeue_false.
        #[arg(long, default_value = "ack_requeue_true")]
        ackmode: String,
    },
    /// The broker answers (GET /api/overview).
    CheckRunning,
    /// No local alarm (memory, disk) is in effect.
    CheckAlarms,
    /// A listener is active on PORT.
    CheckPort {
        port: u16,
    },
    /// A listener for PROTO (amqp, amqp/ssl, http, ...) is active.
    CheckProtocol {
        proto: String,
    },
    /// Every vhost is running.
    CheckVirtualHosts,
    /// Declare, publish to and get from a test queue in VHOST (default: --vhost or /).
    Aliveness {
        #[arg(value_name = "VHOST")]
        target: Option<String>,
    },
}
