"""Unit tests of tables.py (no database): admission errors and the ALTER planned.

  python3 -m unittest discover -s examples/database-table/plugins/mariadb/tests

The SQL itself runs against a real MariaDB in examples/database-table/tests/mariadb_plugin.rs.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tables


def table(engine=None, columns=None, **spec):
    resource = {
        "metadata": {"name": "users", "namespace": "tables"},
        "spec": {"name": "users", "serverName": "app-db", "columns": [{"name": "id", "type": "uint64"}] if columns is None else columns, **spec},
    }
    if engine is not None:
        resource[tables.REFERENCES_KEY] = [
            {"apiVersion": "example.cnpgi.io/v1", "kind": "PostgreSqlDatabaseTable", "name": "users", "field": "spec.references[0]", "object": {}},
            {
                "apiVersion": "example.cnpgi.io/v1",
                "kind": "MariaDbDatabaseTable",
                "name": "users-mdb",
                "field": "spec.references[1]",
                "object": {"spec": {"storageEngine": engine}},
            },
        ]
    return resource


def paths(errors):
    return [tables.field_path(path) for path, _, _ in errors]


class Admission(unittest.TestCase):
    def test_a_valid_table_has_no_error(self):
        self.assertEqual(tables.validate(table("Aria", [{"name": t, "type": t} for t in tables.TYPES])), [])

    def test_each_error_names_its_field(self):
        columns = [{"name": "Id", "type": "uint64"}, {"name": "a", "type": "varchar"}, {"name": "a", "type": "int32"}, {"name": "x" * 64, "type": "text"}]
        errors = tables.validate(table("Blackhole", columns, serverName="App_DB", deletionPolicy="Drop"))
        self.assertEqual(
            paths(errors),
            [
                "spec.serverName",
                "spec.columns[0].name",
                "spec.columns[1].type",
                "spec.columns[2].name",
                "spec.columns[3].name",
                "spec.deletionPolicy",
                "spec.references[1]",
            ],
        )
        self.assertIn("storageEngine 'Blackhole'", errors[-1][2])
        self.assertEqual(paths(tables.validate(table(columns=[], name=""))), ["spec.name", "spec.columns"])

    def test_memory_cannot_store_text_and_engines_are_case_insensitive(self):
        self.assertEqual(paths(tables.validate(table("memory", [{"name": "t", "type": "text"}]))), ["spec.columns[0].type"])
        self.assertEqual(tables.settings(table("myisam")).engine, "MyISAM")
        self.assertEqual(tables.settings(table()).engine, "InnoDB")
        self.assertIsNone(tables.settings(table()).reference)

    def test_name_and_server_are_fixed(self):
        errors = tables.validate_change(table(), table(name="people", serverName="other"))
        self.assertEqual(paths(errors), ["spec.name", "spec.serverName"])

    def test_a_reference_not_read_is_refused_at_sync_only(self):
        missing = table("Aria")
        del missing[tables.REFERENCES_KEY][1]["object"]
        missing[tables.REFERENCES_KEY][1]["error"] = "not found"
        self.assertEqual(tables.validate(missing), [])
        with self.assertRaisesRegex(ValueError, r"MariaDbDatabaseTable users-mdb \(spec.references\[1\]\) could not be read: not found"):
            tables.settings(missing)


SPEC = ({"name": "id", "type": "int64"}, {"name": "email", "type": "string", "nullable": True}, {"name": "age", "type": "int32"})
WANTED = (
    tables.Existing("id", "bigint(20)", True),
    tables.Existing("email", "varchar(255)", False),
    tables.Existing("age", "int(11)", True),
)


class Alterations(unittest.TestCase):
    def test_only_what_differs_in_one_statement(self):
        existing = [tables.Existing("id", "int(11)", True), tables.Existing("email", "varchar(255)", False), tables.Existing("old", "text", False)]
        clauses = tables.alterations(SPEC, WANTED, existing, "Aria", "InnoDB", drop_extra=False)
        self.assertEqual(clauses, ["MODIFY COLUMN `id` BIGINT NOT NULL", "ADD COLUMN `age` INT NOT NULL AFTER `email`", "ENGINE=Aria"])
        dropping = tables.alterations(SPEC, WANTED, existing, "innodb", "InnoDB", drop_extra=True)
        self.assertEqual(dropping[-1], "DROP COLUMN `old`")
        self.assertNotIn("ENGINE=innodb", dropping)

    def test_nothing_when_it_matches_and_first_when_first(self):
        self.assertEqual(tables.alterations(SPEC, WANTED, WANTED, "InnoDB", "InnoDB", drop_extra=True), [])
        clauses = tables.alterations(SPEC, WANTED, WANTED[1:], "InnoDB", "InnoDB", drop_extra=False)
        self.assertEqual(clauses, ["ADD COLUMN `id` BIGINT NOT NULL FIRST"])


if __name__ == "__main__":
    unittest.main()
