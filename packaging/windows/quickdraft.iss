; Inno Setup 6 script: the Windows installer for Quickdraft, from the PyInstaller bundle.
;
;   pyinstaller --noconfirm --distpath dist --workpath build\pyinstaller packaging\quickdraft.spec
;   iscc /DAppVersion=0.1.0 packaging\windows\quickdraft.iss
;   iscc /DAppVersion=0.1.0 /DVariant=cuda packaging\windows\quickdraft.iss   (the CUDA build's bundle)
;
; Output: dist\Quickdraft-<version>-windows-x64-setup.exe. Optional defines: /DSourceDir=<bundle>
; (default dist\quickdraft) and /DOutputDir=<folder> (default dist), both relative to this file, and
; /DVariant=<name> for a variant build: /DVariant=cuda (a bundle with llama.cpp's CUDA module and the
; CUDA runtime) writes dist\Quickdraft-<version>-windows-x64-cuda-setup.exe. Every variant has the
; same AppId and folder, so installing one replaces the other: one Quickdraft per machine.
; Installs per user by default (no administrator rights needed); the first page offers all users.
; Uninstalling removes the program, its shortcuts and its PATH entry, never the user's
; conversations, settings or models (they live under %LOCALAPPDATA%\Quickdraft).

#ifndef AppVersion
  #error Pass the version from app/__init__.py: iscc /DAppVersion=X.Y.Z packaging\windows\quickdraft.iss
#endif
#ifndef SourceDir
  #define SourceDir "..\..\dist\quickdraft"
#endif
#ifndef OutputDir
  #define OutputDir "..\..\dist"
#endif
#ifdef Variant
  #define VariantSuffix "-" + Variant
  #define VariantLabel " (" + Variant + ")"
#else
  #define VariantSuffix ""
  #define VariantLabel ""
#endif
#define AppName "Quickdraft"
#define AppExe "quickdraft.exe"
#define CliExe "quickdraft-cli.exe"

[Setup]
; AppId identifies the product across versions (upgrades, uninstall): never change it.
AppId={{3C17C613-E553-49CD-BCF4-5B2B373EB8D5}
AppName={#AppName}
AppVersion={#AppVersion}
AppVerName={#AppName} {#AppVersion}{#VariantLabel}
AppPublisher=The Quickdraft authors
VersionInfoVersion={#AppVersion}
VersionInfoProductName={#AppName}
VersionInfoDescription={#AppName} installer
DefaultDirName={autopf}\{#AppName}
DefaultGroupName={#AppName}
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
MinVersion=10.0
OutputDir={#OutputDir}
OutputBaseFilename={#AppName}-{#AppVersion}-windows-x64{#VariantSuffix}-setup
SetupIconFile=..\..\resources\icons\quickdraft.ico
UninstallDisplayIcon={app}\{#AppExe}
UninstallDisplayName={#AppName} {#AppVersion}{#VariantLabel}
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
ChangesEnvironment=yes
CloseApplications=yes

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked
Name: "addtopath"; Description: "Add Quickdraft to PATH (for the {#CliExe} command line)"; GroupDescription: "Command line:"; Flags: unchecked

[Files]
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[InstallDelete]
; an upgrade replaces the whole bundle: no stale library from an older version may stay behind
Type: filesandordirs; Name: "{app}\_internal"

[Icons]
Name: "{group}\{#AppName}"; Filename: "{app}\{#AppExe}"; WorkingDir: "{app}"; Comment: "Chat with local LLMs, faster with speculative decoding"
Name: "{group}\{cm:UninstallProgram,{#AppName}}"; Filename: "{uninstallexe}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#AppExe}"; WorkingDir: "{app}"; Tasks: desktopicon

[Registry]
Root: HKA; Subkey: "{code:EnvironmentKey}"; ValueType: expandsz; ValueName: "Path"; ValueData: "{olddata};{app}"; Tasks: addtopath; Check: NotOnPath(ExpandConstant('{app}'))

[Run]
Filename: "{app}\{#AppExe}"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent

[Code]
{ The user's or the machine's environment, matching the install mode. }
function EnvironmentKey(Param: String): String;
begin
  if IsAdminInstallMode then
    Result := 'SYSTEM\CurrentControlSet\Control\Session Manager\Environment'
  else
    Result := 'Environment';
end;

{ Where Dir starts in Path as a whole ';'-separated entry (case-insensitive), or 0. }
function PathEntryPos(Path, Dir: String): Integer;
begin
  Result := Pos(';' + Uppercase(Dir) + ';', ';' + Uppercase(Path) + ';');
end;

function NotOnPath(Dir: String): Boolean;
var
  Path: String;
begin
  if not RegQueryStringValue(HKA, EnvironmentKey(''), 'Path', Path) then
    Result := True
  else
    Result := PathEntryPos(Path, Dir) = 0;
end;

procedure RemoveFromPath(Dir: String);
var
  Path: String;
  P: Integer;
begin
  if not RegQueryStringValue(HKA, EnvironmentKey(''), 'Path', Path) then
    exit;
  P := PathEntryPos(Path, Dir);
  if P = 0 then
    exit;
  if P > 1 then
    Delete(Path, P - 1, Length(Dir) + 1)   { the ';' before the entry, and the entry }
  else
    Delete(Path, 1, Length(Dir) + 1);      { the first entry, and the ';' after it }
  RegWriteExpandStringValue(HKA, EnvironmentKey(''), 'Path', Path);
end;

procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
begin
  if CurUninstallStep = usUninstall then
    RemoveFromPath(ExpandConstant('{app}'));
end;
