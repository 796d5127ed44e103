//! What `pg_catalog` describes for one caller: the namespaces and tables it may read, from
//! the catalog cached in the process.
//!
//! One `pg_catalog` schema serves all of a caller's sessions (see
//! [`crate::QueryService::for_postgres`]) so that object ids stay the same from one
//! statement to the next: `psql`'s `\d table` finds a table's oid with one query and reads
//! its columns by that oid with the next, each in a session of its own.

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::datasource::TableType;
use datafusion::error::DataFusionError;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;
use strata_engine::Db;

use crate::auth::{DEFAULT_NAMESPACE, Principal, split_name};
use crate::service::CATALOG;

/// The schema PostgreSQL keeps its catalog in (listed so that clients joining system
/// objects to their namespace find it; its tables are not described).
const PG_CATALOG: &str = "pg_catalog";

/// The tables one caller may read.
#[derive(Debug, Clone)]
pub struct CallerCatalog {
    db: Db,
    who: Principal,
}

impl CallerCatalog {
    /// What `who` may read in `db`.
    pub fn new(db: Db, who: Principal) -> Self {
        Self { db, who }
    }

    /// The readable tables, as (namespace, table) in order, and the readable namespaces.
    async fn tables(&self) -> Result<(Vec<String>, Vec<(String, String)>), DataFusionError> {
        let catalog = self
            .db
            .catalog()
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let mut tables: Vec<(String, String)> = catalog
            .catalog
            .tables
            .keys()
            .map(|name| split_name(name))
            .filter(|(ns, _)| self.who.can_read(ns))
            .map(|(ns, t)| (ns.to_string(), t.to_string()))
            .collect();
        tables.sort();
        let mut namespaces: Vec<String> = tables.iter().map(|(ns, _)| ns.clone()).collect();
        if self.who.can_read(DEFAULT_NAMESPACE) {
            namespaces.push(DEFAULT_NAMESPACE.to_string());
        }
        namespaces.sort();
        namespaces.dedup();
        Ok((namespaces, tables))
    }
}

#[async_trait]
impl CatalogInfo for CallerCatalog {
    async fn catalog_names(&self) -> Result<Vec<String>, DataFusionError> {
        Ok(vec![CATALOG.to_string()])
    }

    async fn schema_names(&self, catalog: &str) -> Result<Option<Vec<String>>, DataFusionError> {
        if catalog != CATALOG {
            return Ok(None);
        }
        let (mut namespaces, _) = self.tables().await?;
        namespaces.push(PG_CATALOG.to_string());
        Ok(Some(namespaces))
    }

    async fn table_names(
        &self,
        catalog: &str,
        schema: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError> {
        if catalog != CATALOG {
            return Ok(None);
        }
        if schema == PG_CATALOG {
            return Ok(Some(Vec::new()));
        }
        let (namespaces, tables) = self.tables().await?;
        if !namespaces.iter().any(|ns| ns == schema) {
            return Ok(None);
        }
        Ok(Some(
            tables
                .into_iter()
                .filter(|(ns, _)| ns == schema)
                .map(|(_, t)| t)
                .collect(),
        ))
    }

    async fn table_schema(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<SchemaRef>, DataFusionError> {
        if catalog != CATALOG || !self.who.can_read(schema) {
            return Ok(None);
        }
        match self
            .db
            .table_schema(&crate::auth::qualified(schema, table))
            .await
        {
            Ok(t) => Ok(Some(t.read_schema.clone())),
            Err(strata_engine::Error::TableNotFound(_)) => Ok(None),
            Err(e) => Err(DataFusionError::External(Box::new(e))),
        }
    }

    async fn table_type(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<TableType>, DataFusionError> {
        Ok(self
            .table_schema(catalog, schema, table)
            .await?
            .map(|_| TableType::Base))
    }
}
