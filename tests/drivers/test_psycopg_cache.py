"""psycopg 3's statement cache through pgfleet in transaction mode (issue 19, item 1), with each
psycopg 3 the tests have (psycopg_scenarios.DRIVERS: Debian's 3.1 and PyPI's pure-Python one send
SQL DEALLOCATE, PyPI's binary one over libpq 18 a protocol-level Close), compared with a direct
connection to PostgreSQL.

With prepare_threshold=0 and prepared_max=5, ten distinct statements in one transaction make
psycopg drop the oldest while the transaction is open; in pipeline mode the DEALLOCATE or Close
comes behind statements the server has not answered yet. The name is the client's alone (the
server knows the statement as pgfleet_...): pgfleet must act on its own mapping in stream order,
never pass the name to the server, and answer in the right place."""

import pytest

from conftest import assert_clean_log
import psycopg_scenarios
from psycopg_scenarios import DRIVERS

EVICTION = [
    "eviction_sequential_in_transaction",
    "eviction_sequential_in_autocommit_transaction",
    "eviction_in_pipeline_in_transaction",
    "eviction_in_pipeline_autocommit",
]


def compare(pg, fleet, driver, scenario):
    direct = psycopg_scenarios.run(driver, scenario, pg.dsn())
    pooled = psycopg_scenarios.run(driver, scenario, fleet.dsn())
    assert pooled == direct, f"through pgfleet:\n{pooled}\ndirect:\n{direct}"
    assert_clean_log(fleet)
    return direct


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("scenario", EVICTION)
def test_cache_eviction_as_on_a_direct_connection(pg, pgfleet, driver, scenario):
    direct = compare(pg, pgfleet(pool_size=2), driver, scenario)
    assert all(kind in ("ok", "cache") for kind, _ in direct), direct
    assert ["cache", True] in direct


@pytest.mark.parametrize("driver", DRIVERS)
def test_skipped_eviction_after_an_error_in_a_pipeline(pg, pgfleet, driver):
    """The cache evicts behind a failed statement of a pipeline: PostgreSQL skips that Close or
    DEALLOCATE, and the statement must keep its name through pgfleet too."""
    direct = compare(pg, pgfleet(pool_size=2), driver, "close_after_an_error_in_pipeline")
    assert ["error", "UndefinedTable"] in direct


@pytest.mark.parametrize("driver", DRIVERS)
def test_reparse_after_a_failed_parse_in_a_pipeline(pg, pgfleet, driver):
    """A name whose Parse failed, prepared again in the next batch of the same pipeline write:
    free, as PostgreSQL says (pgfleet waits for the first answer before it decides)."""
    direct = compare(pg, pgfleet(pool_size=2), driver,
                     "reparse_after_a_failed_parse_in_a_pipeline")
    assert ["TUPLES_OK", None, "42"] in direct and ["syncs", 4] in direct, direct


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("scenario",
                         ["deallocate_all_in_transaction", "discard_all_in_transaction"])
def test_cache_maintenance_inside_a_transaction(pg, pgfleet, driver, scenario):
    direct = compare(pg, pgfleet(pool_size=2), driver, scenario)
    assert any(kind == "ok" for kind, _ in direct)
