/** The server's version and its idle-in-transaction timeout (`ferry doctor`). */
export const SERVER_SETTINGS_SQL = `SELECT current_setting('server_version') AS v, current_setting('idle_in_transaction_session_timeout') AS idle`;
