import type { Table } from "../api";
import type { Built } from "../charts";

/** One dashboard chart: the table it draws (its `data-chart` name) and how. */
export interface Panel {
  name: string;
  title: string;
  /** Tables whose notes are shown under the chart. */
  notes: string[];
  wide?: boolean;
  build(tables: Record<string, Table>): Built;
}

export function rowsOf(tables: Record<string, Table>, name: string): Table["rows"] {
  return tables[name]?.rows ?? [];
}
