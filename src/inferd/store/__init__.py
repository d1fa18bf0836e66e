"""Storage: SQLAlchemy Core tables, one repository module per aggregate, alembic migrations."""
