# test/t/IdemClaimWait.pm: the holder and the waiting claims of the TAP
# tests of claim(..., wait) (120_claim_wait.pl; 121_claim_wait_standby.pl,
# whose waiters wait on a streaming standby of the holder's node).  Each
# waiter runs in a session of its own and prints its answer with the time
# it got it, which a standby, where nothing can be written, allows too.
#
#   my $w = IdemClaimWait->new(holder => $node, waiter => $standby,
#                              lease => '15s', wait => '60s');
#       waiter (default: the holder's node), the lease of hold() and the
#       wait of start_waiter() (defaults 1 hour and 30s); creates the table
#       "marks" (what, at) on the holder
#   $w->hold($key [, $lease])       claims $key on the holder: its fence,
#                                   once the waiter's node has it too
#   $w->holder_call($what, $sql)    $sql on the holder, in a transaction
#                                   that marks $what with its time
#   $w->mark($what)                 marks $what now (a holder's crash)
#   $w->start_waiter($key, %opt)    a waiting claim of $key in a session of
#                                   its own on the waiter's node, once it
#                                   runs; %opt: wait, user (the role),
#                                   setup (SQL before), call (another call
#                                   than idempotency.claim(...) whose
#                                   outcome, fence and response_body it
#                                   prints).  Returns the session.
#   $w->waiter_pids([asleep => 1])  the backends of the waiters that have
#                                   not answered (only those that sleep)
#   $w->wait_until_sleeping($count) until $count of them sleep
#   $w->answer_of($session)         waits for its answer; ("outcome|fence
#                                   set|body", the time, stderr), the
#                                   first two '' and undef when it raised
#                                   an error; ends the session
#   $w->since_mark($what, $at)      seconds from the mark $what to $at
package IdemClaimWait;
use strict;
use warnings;
use IdemEdition;

# in the waiters' statement only, so that pg_stat_activity tells them apart
my $tag = 'idem-waiter';

sub new
{
	my ($class, %opt) = @_;
	my $self = bless {
		holder => $opt{holder},
		waiter => $opt{waiter} // $opt{holder},
		lease => $opt{lease} // '1 hour',
		wait => $opt{wait} // '30s',
	}, $class;
	$self->{holder}->safe_psql('postgres', 'CREATE TABLE marks (what text, at timestamptz)');
	$self->catch_up;
	return $self;
}

# The waiter's node has replayed what the holder's committed.
sub catch_up
{
	my ($self) = @_;
	$self->{holder}->wait_for_catchup($self->{waiter}) if $self->{waiter} != $self->{holder};
	return;
}

sub hold
{
	my ($self, $key, $lease) = @_;
	my $fence = $self->{holder}->safe_psql('postgres', qq{
SELECT fence FROM idempotency.claim('$key', '{"a": 1}', lease => '@{[ $lease // $self->{lease} ]}')});
	$self->catch_up;
	return $fence;
}

sub holder_call
{
	my ($self, $what, $sql) = @_;
	$self->{holder}->safe_psql('postgres', qq{
BEGIN;
$sql;
INSERT INTO marks VALUES ('$what', clock_timestamp());
COMMIT;});
	return;
}

sub mark
{
	my ($self, $what) = @_;
	$self->{holder}->safe_psql('postgres', qq{INSERT INTO marks VALUES ('$what', clock_timestamp())});
	return;
}

sub start_waiter
{
	my ($self, $key, %opt) = @_;
	my $call = $opt{call} // qq{idempotency.claim('$key', '{"a": 1}', wait => '@{[ $opt{wait} // $self->{wait} ]}')};
	my $psql = $self->{waiter}->background_psql('postgres', on_error_stop => 0,
		extra_params => $opt{user} ? [ '-U', $opt{user} ] : []);
	$psql->query_safe($opt{setup}) if $opt{setup};
	$psql->query_until(qr/started/, qq{
\\set VERBOSITY verbose
\\echo started
SELECT '$tag|' || outcome || '|' || (fence IS NOT NULL) || '|' || coalesce(response_body::text, '')
       || '|' || clock_timestamp()
  FROM $call;
\\echo done
});
	return $psql;
}

sub waiter_pids
{
	my ($self, %opt) = @_;
	my $asleep = !$opt{asleep} ? 'true'
	  : idem_portable() ? q{wait_event = 'PgSleep'} : q{wait_event_type = 'Extension'};
	my $pids = $self->{waiter}->safe_psql('postgres', qq{
SELECT pid FROM pg_stat_activity
 WHERE query LIKE '%$tag|%' AND state = 'active' AND pid <> pg_backend_pid() AND $asleep
 ORDER BY pid});
	return split /\n/, $pids;
}

sub wait_until_sleeping
{
	my ($self, $count) = @_;
	for (1 .. 1800)
	{
		return if $self->waiter_pids(asleep => 1) >= $count;
		select(undef, undef, undef, 0.1);
	}
	die "the waiters never slept ($count expected)";
}

sub answer_of
{
	my ($self, $psql) = @_;
	my $out = $psql->query_until(qr/done\r?\n/, '');
	my $err = $psql->{stderr};
	$psql->quit;
	my ($answer, $at) = $out =~ /^\Q$tag\E\|(.*)\|([^|\n]*)$/m;
	return ($answer // '', $at, $err);
}

sub since_mark
{
	my ($self, $what, $at) = @_;
	return $self->{holder}->safe_psql('postgres', qq{
SELECT extract(epoch FROM '$at'::timestamptz - at) FROM marks WHERE what = '$what'});
}

1;
