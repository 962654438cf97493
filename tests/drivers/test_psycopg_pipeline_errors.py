"""psycopg 3 pipelines with errors through pgfleet behave as on a direct connection (issue 19,
item 2), with each psycopg 3 the tests have (psycopg_scenarios.DRIVERS): an error on the first,
middle and last statement of a pipeline followed by rollback, commit and a new pipeline, and an
error raised at commit in a pipeline followed by rollback and more statements. What the client
sees (values, and the class of each error) must be the same."""

import pytest

from conftest import assert_clean_log
import psycopg_scenarios
from psycopg_scenarios import DRIVERS


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("scenario", [
    "error_on_first_statement_of_pipeline",
    "error_on_middle_statement_of_pipeline",
    "error_on_last_statement_of_pipeline",
    "error_at_commit_in_pipeline",
])
def test_error_in_a_pipeline_as_on_a_direct_connection(pg, pgfleet, driver, scenario):
    fleet = pgfleet(pool_size=2)
    direct = psycopg_scenarios.run(driver, scenario, pg.dsn())
    pooled = psycopg_scenarios.run(driver, scenario, fleet.dsn())
    assert pooled == direct, f"through pgfleet:\n{pooled}\ndirect:\n{direct}"
    assert ["error", "UndefinedTable"] in direct
    assert_clean_log(fleet)
