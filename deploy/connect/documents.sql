-- The example table of docs/connectors.md, with three rows: a text in two spaces, and a version of it that
-- differs in a number.
--   PG_PORT=5433 deploy/postgres/postgres.sh psql -f deploy/connect/documents.sql
create table documents (
    id bigint primary key,
    space text not null,
    body text,
    acl text[],
    modified_at timestamptz not null default now(),
    title text
);
insert into documents (id, space, body, acl, title) values
    (1, 'eng', 'Refunds are issued within 30 days of purchase. The refund goes to the original payment method once the returned item has been received and inspected by the warehouse team. Items must be unused and in their original packaging, with the receipt or order number. Shipping costs are refunded only when the item arrived damaged or was not the item ordered.', '{group:eng}', 'Refunds'),
    (2, 'sales', 'Refunds are issued within 30 days of purchase. The refund goes to the original payment method once the returned item has been received and inspected by the warehouse team. Items must be unused and in their original packaging, with the receipt or order number. Shipping costs are refunded only when the item arrived damaged or was not the item ordered.', '{group:sales}', 'Refunds (sales)'),
    (3, 'eng', 'Refunds are issued within 45 days of purchase. The refund goes to the original payment method once the returned item has been received and inspected by the warehouse team. Items must be unused and in their original packaging, with the receipt or order number. Shipping costs are refunded only when the item arrived damaged or was not the item ordered.', '{group:eng}', 'Refunds, old');
