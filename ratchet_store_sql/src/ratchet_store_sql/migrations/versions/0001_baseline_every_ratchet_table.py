"""baseline: every Ratchet table

Revision ID: 0001
Revises: (none: the baseline)
Create Date: 2026-12-02 15:03:55.098897
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import ratchet_store_sql._types
from sqlalchemy.dialects import mysql
revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table('ratchet_archived_jobs',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('job_type', sa.String(length=20), nullable=False),
    sa.Column('target', sa.String(length=512), nullable=False),
    sa.Column('payload', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=False),
    sa.Column('scheduled_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('created_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('updated_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('started_at', ratchet_store_sql._types.UtcDateTime(), nullable=True),
    sa.Column('finished_at', ratchet_store_sql._types.UtcDateTime(), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('max_retries', sa.Integer(), nullable=False),
    sa.Column('backoff', sa.Text(), nullable=True),
    sa.Column('claim_seq', sa.Integer(), nullable=False),
    sa.Column('owner', sa.String(length=255), nullable=True),
    sa.Column('heartbeat_at', ratchet_store_sql._types.UtcDateTime(), nullable=True),
    sa.Column('idempotency_key', sa.String(length=255), nullable=True),
    sa.Column('execution_target', sa.String(length=255), nullable=True),
    sa.Column('result', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=True),
    sa.Column('last_error', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=True),
    sa.Column('parent_id', sa.Uuid(), nullable=True),
    sa.Column('batch_id', sa.Uuid(), nullable=True),
    sa.Column('signal_key', sa.String(length=255), nullable=True),
    sa.Column('signal_deadline', ratchet_store_sql._types.UtcDateTime(), nullable=True),
    sa.Column('signal_payload', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=True),
    sa.Column('resource_key', sa.String(length=255), nullable=True),
    sa.Column('recurring_name', sa.String(length=255), nullable=True),
    sa.Column('tags', sa.Text(), nullable=False),
    sa.Column('properties', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=False),
    sa.Column('state', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=False),
    sa.Column('archived_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ratchet_archived_jobs'))
    )
    with op.batch_alter_table('ratchet_archived_jobs', schema=None) as batch_op:
        batch_op.create_index('ix_ratchet_archived_jobs_finished_at', ['finished_at'], unique=False)

    op.create_table('ratchet_batches',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('total', sa.Integer(), nullable=False),
    sa.Column('succeeded', sa.Integer(), nullable=False),
    sa.Column('failed', sa.Integer(), nullable=False),
    sa.Column('parent_job_id', sa.Uuid(), nullable=True),
    sa.Column('created_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('completed_at', ratchet_store_sql._types.UtcDateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ratchet_batches'))
    )
    op.create_table('ratchet_executions',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('node_id', sa.String(length=255), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('started_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('finished_at', ratchet_store_sql._types.UtcDateTime(), nullable=True),
    sa.Column('duration_ms', sa.BigInteger(), nullable=True),
    sa.Column('error', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ratchet_executions'))
    )
    with op.batch_alter_table('ratchet_executions', schema=None) as batch_op:
        batch_op.create_index('ix_ratchet_executions_job_id_attempt', ['job_id', 'attempt'], unique=False)

    op.create_table('ratchet_job_logs',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('logged_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('level', sa.String(length=20), nullable=False),
    sa.Column('message', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ratchet_job_logs'))
    )
    with op.batch_alter_table('ratchet_job_logs', schema=None) as batch_op:
        batch_op.create_index('ix_ratchet_job_logs_job_id_id', ['job_id', 'id'], unique=False)

    op.create_table('ratchet_jobs',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('job_type', sa.String(length=20), nullable=False),
    sa.Column('target', sa.String(length=512), nullable=False),
    sa.Column('payload', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=False),
    sa.Column('scheduled_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('created_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('updated_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('started_at', ratchet_store_sql._types.UtcDateTime(), nullable=True),
    sa.Column('finished_at', ratchet_store_sql._types.UtcDateTime(), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('max_retries', sa.Integer(), nullable=False),
    sa.Column('backoff', sa.Text(), nullable=True),
    sa.Column('claim_seq', sa.Integer(), nullable=False),
    sa.Column('owner', sa.String(length=255), nullable=True),
    sa.Column('heartbeat_at', ratchet_store_sql._types.UtcDateTime(), nullable=True),
    sa.Column('idempotency_key', sa.String(length=255), nullable=True),
    sa.Column('execution_target', sa.String(length=255), nullable=True),
    sa.Column('result', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=True),
    sa.Column('last_error', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=True),
    sa.Column('parent_id', sa.Uuid(), nullable=True),
    sa.Column('batch_id', sa.Uuid(), nullable=True),
    sa.Column('signal_key', sa.String(length=255), nullable=True),
    sa.Column('signal_deadline', ratchet_store_sql._types.UtcDateTime(), nullable=True),
    sa.Column('signal_payload', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=True),
    sa.Column('resource_key', sa.String(length=255), nullable=True),
    sa.Column('recurring_name', sa.String(length=255), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ratchet_jobs')),
    sa.UniqueConstraint('idempotency_key', name=op.f('uq_ratchet_jobs_idempotency_key'))
    )
    with op.batch_alter_table('ratchet_jobs', schema=None) as batch_op:
        batch_op.create_index('ix_ratchet_jobs_batch_id', ['batch_id'], unique=False)
        batch_op.create_index('ix_ratchet_jobs_claim', ['status', sa.literal_column('priority DESC'), 'scheduled_at', 'id'], unique=False, postgresql_where=sa.text("status = 'PENDING'"), sqlite_where=sa.text("status = 'PENDING'"))
        batch_op.create_index('ix_ratchet_jobs_created_at', ['created_at'], unique=False)
        batch_op.create_index('ix_ratchet_jobs_owner_status', ['owner', 'status'], unique=False)
        batch_op.create_index('ix_ratchet_jobs_parent_id', ['parent_id'], unique=False)
        batch_op.create_index('ix_ratchet_jobs_signal_key', ['signal_key'], unique=False)
        batch_op.create_index('ix_ratchet_jobs_status_finished_at', ['status', 'finished_at'], unique=False)
        batch_op.create_index('ix_ratchet_jobs_status_heartbeat_at', ['status', 'heartbeat_at'], unique=False)
        batch_op.create_index('ix_ratchet_jobs_status_signal_deadline', ['status', 'signal_deadline'], unique=False)
        batch_op.create_index('ix_ratchet_jobs_status_started_at', ['status', 'started_at'], unique=False)
        batch_op.create_index('ix_ratchet_jobs_target', ['target'], unique=False)

    op.create_table('ratchet_locks',
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('owner', sa.String(length=255), nullable=False),
    sa.Column('acquired_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('expires_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_ratchet_locks'))
    )
    op.create_table('ratchet_nodes',
    sa.Column('node_id', sa.String(length=255), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('started_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('last_heartbeat', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('running_jobs', sa.Integer(), nullable=False),
    sa.Column('tags', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('node_id', name=op.f('pk_ratchet_nodes'))
    )
    with op.batch_alter_table('ratchet_nodes', schema=None) as batch_op:
        batch_op.create_index('ix_ratchet_nodes_last_heartbeat', ['last_heartbeat'], unique=False)

    op.create_table('ratchet_recurring_jobs',
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('cron', sa.String(length=255), nullable=False),
    sa.Column('timezone', sa.String(length=64), nullable=False),
    sa.Column('target', sa.String(length=512), nullable=False),
    sa.Column('payload', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('max_retries', sa.Integer(), nullable=False),
    sa.Column('next_fire_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('last_fired_at', ratchet_store_sql._types.UtcDateTime(), nullable=True),
    sa.Column('misfire_policy', sa.String(length=20), nullable=False),
    sa.Column('enabled', sa.Boolean(), nullable=False),
    sa.Column('created_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_ratchet_recurring_jobs'))
    )
    with op.batch_alter_table('ratchet_recurring_jobs', schema=None) as batch_op:
        batch_op.create_index('ix_ratchet_recurring_jobs_enabled_next_fire_at', ['enabled', 'next_fire_at'], unique=False)

    op.create_table('ratchet_resource_permits',
    sa.Column('resource_key', sa.String(length=255), nullable=False),
    sa.Column('holder', sa.String(length=255), nullable=False),
    sa.Column('acquired_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.Column('expires_at', ratchet_store_sql._types.UtcDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('resource_key', 'holder', name=op.f('pk_ratchet_resource_permits'))
    )
    op.create_table('ratchet_workflow_conditions',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('parent_job_id', sa.Uuid(), nullable=False),
    sa.Column('child_job_id', sa.Uuid(), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('expression', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=True),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ratchet_workflow_conditions'))
    )
    with op.batch_alter_table('ratchet_workflow_conditions', schema=None) as batch_op:
        batch_op.create_index('ix_ratchet_workflow_conditions_parent_job_id_position', ['parent_job_id', 'position'], unique=False)

    op.create_table('ratchet_job_properties',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('key', sa.String(length=255), nullable=False),
    sa.Column('value', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['ratchet_jobs.id'], name=op.f('fk_ratchet_job_properties_job_id_ratchet_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', 'key', name=op.f('pk_ratchet_job_properties'))
    )
    with op.batch_alter_table('ratchet_job_properties', schema=None) as batch_op:
        batch_op.create_index('ix_ratchet_job_properties_key', ['key'], unique=False)

    op.create_table('ratchet_job_state',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('namespace', sa.String(length=255), nullable=False),
    sa.Column('json', sa.Text().with_variant(mysql.LONGTEXT(), 'mariadb').with_variant(mysql.LONGTEXT(), 'mysql'), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['ratchet_jobs.id'], name=op.f('fk_ratchet_job_state_job_id_ratchet_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', 'namespace', name=op.f('pk_ratchet_job_state'))
    )
    op.create_table('ratchet_job_tags',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('tag', sa.String(length=128), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['ratchet_jobs.id'], name=op.f('fk_ratchet_job_tags_job_id_ratchet_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', 'tag', name=op.f('pk_ratchet_job_tags'))
    )
    with op.batch_alter_table('ratchet_job_tags', schema=None) as batch_op:
        batch_op.create_index('ix_ratchet_job_tags_tag_job_id', ['tag', 'job_id'], unique=False)




def downgrade() -> None:

    with op.batch_alter_table('ratchet_job_tags', schema=None) as batch_op:
        batch_op.drop_index('ix_ratchet_job_tags_tag_job_id')

    op.drop_table('ratchet_job_tags')
    op.drop_table('ratchet_job_state')
    with op.batch_alter_table('ratchet_job_properties', schema=None) as batch_op:
        batch_op.drop_index('ix_ratchet_job_properties_key')

    op.drop_table('ratchet_job_properties')
    with op.batch_alter_table('ratchet_workflow_conditions', schema=None) as batch_op:
        batch_op.drop_index('ix_ratchet_workflow_conditions_parent_job_id_position')

    op.drop_table('ratchet_workflow_conditions')
    op.drop_table('ratchet_resource_permits')
    with op.batch_alter_table('ratchet_recurring_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_ratchet_recurring_jobs_enabled_next_fire_at')

    op.drop_table('ratchet_recurring_jobs')
    with op.batch_alter_table('ratchet_nodes', schema=None) as batch_op:
        batch_op.drop_index('ix_ratchet_nodes_last_heartbeat')

    op.drop_table('ratchet_nodes')
    op.drop_table('ratchet_locks')
    with op.batch_alter_table('ratchet_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_ratchet_jobs_target')
        batch_op.drop_index('ix_ratchet_jobs_status_started_at')
        batch_op.drop_index('ix_ratchet_jobs_status_signal_deadline')
        batch_op.drop_index('ix_ratchet_jobs_status_heartbeat_at')
        batch_op.drop_index('ix_ratchet_jobs_status_finished_at')
        batch_op.drop_index('ix_ratchet_jobs_signal_key')
        batch_op.drop_index('ix_ratchet_jobs_parent_id')
        batch_op.drop_index('ix_ratchet_jobs_owner_status')
        batch_op.drop_index('ix_ratchet_jobs_created_at')
        batch_op.drop_index('ix_ratchet_jobs_claim', postgresql_where=sa.text("status = 'PENDING'"), sqlite_where=sa.text("status = 'PENDING'"))
        batch_op.drop_index('ix_ratchet_jobs_batch_id')

    op.drop_table('ratchet_jobs')
    with op.batch_alter_table('ratchet_job_logs', schema=None) as batch_op:
        batch_op.drop_index('ix_ratchet_job_logs_job_id_id')

    op.drop_table('ratchet_job_logs')
    with op.batch_alter_table('ratchet_executions', schema=None) as batch_op:
        batch_op.drop_index('ix_ratchet_executions_job_id_attempt')

    op.drop_table('ratchet_executions')
    op.drop_table('ratchet_batches')
    with op.batch_alter_table('ratchet_archived_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_ratchet_archived_jobs_finished_at')

    op.drop_table('ratchet_archived_jobs')

