// pgx (v5.4, its default statement cache) after a schema change: tests/drivers/test_pgx_schema_change.py
// builds this program and runs it against PostgreSQL and through pgfleet, and compares the output.
// pgx prepares each query once per connection and, when PostgreSQL refuses the cached plan
// (0A000 cached plan must not change result type), forgets the statement and returns the error;
// its next run prepares the text again (Close, then Parse). Prints one line per result
// ("ok ..." or "error SQLSTATE") and "done".
//
//	go run . DSN
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func outcome(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return "error " + pgErr.Code
	}
	return "error client"
}

func query(ctx context.Context, conn *pgx.Conn, sql string, args ...any) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		fmt.Println(outcome(err))
		return
	}
	var line []string
	for _, field := range rows.FieldDescriptions() {
		line = append(line, field.Name)
	}
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			fmt.Println(outcome(err))
			rows.Close()
			return
		}
		for _, v := range values {
			line = append(line, fmt.Sprint(v))
		}
	}
	if err := rows.Err(); err != nil {
		fmt.Println(outcome(err))
		return
	}
	fmt.Println("ok " + strings.Join(line, " "))
}

func exec(ctx context.Context, conn *pgx.Conn, sql string, args ...any) {
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		fmt.Println(outcome(err))
		return
	}
	fmt.Println("ok")
}

func connect(ctx context.Context, dsn string) *pgx.Conn {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return conn
}

func main() {
	ctx := context.Background()
	dsn := os.Args[1]
	first := connect(ctx, dsn)
	ddl := connect(ctx, dsn)
	for _, sql := range []string{
		"DROP TABLE IF EXISTS pgx_schema, pgx_enum",
		"DROP TYPE IF EXISTS pgx_mood",
		"CREATE TABLE pgx_schema (a int, b text, c int)",
		"INSERT INTO pgx_schema VALUES (1, 'x', 2)",
		"CREATE TYPE pgx_mood AS ENUM ('happy', 'sad')",
		"CREATE TABLE pgx_enum (m pgx_mood)",
		"INSERT INTO pgx_enum VALUES ('happy')",
	} {
		exec(ctx, ddl, sql)
	}
	selectAll := "SELECT * FROM pgx_schema WHERE a = $1"
	selectEnum := "SELECT m, m::text FROM pgx_enum WHERE m::text <> $1"
	for i := 0; i < 2; i++ {
		query(ctx, first, selectAll, 1)
		query(ctx, first, selectEnum, "sad")
	}
	exec(ctx, ddl, "ALTER TABLE pgx_schema DROP COLUMN b")
	exec(ctx, ddl, "DROP TABLE pgx_enum")
	exec(ctx, ddl, "DROP TYPE pgx_mood")
	exec(ctx, ddl, "CREATE TYPE pgx_mood AS ENUM ('happy', 'sad', 'ok')")
	exec(ctx, ddl, "CREATE TABLE pgx_enum (m pgx_mood)")
	exec(ctx, ddl, "INSERT INTO pgx_enum VALUES ('ok')")
	for i := 0; i < 3; i++ {
		query(ctx, first, selectAll, 1)
		query(ctx, first, selectEnum, "sad")
	}
	second := connect(ctx, dsn)
	query(ctx, second, selectAll, 1)
	query(ctx, second, selectEnum, "happy")
	second.Close(ctx)
	first.Close(ctx)
	ddl.Close(ctx)
	fmt.Println("done")
}
